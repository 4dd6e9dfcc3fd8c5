"""Wait until a vLLM replica serves again after a fault; print how long it took.

    python3 recover.py BASE_URL MODEL SINCE_EPOCH LIMIT_S   (key from OPENAI_API_KEY)

Sends a 1-token completion every second (each with a 10 s timeout) until one succeeds, or LIMIT_S
passes. Prints JSON: seconds from SINCE_EPOCH (when the fault was injected) to the first success,
the attempts, and how many failed. Stdlib only, so it runs with any python3.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

base_url, model, since, limit = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
body = json.dumps({"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}).encode()
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
attempts = failed = 0
last_error = ""
while time.time() - since < limit:
    attempts += 1
    try:
        request = urllib.request.Request(base_url + "/completions", data=body, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status == 200:
                print(
                    json.dumps(
                        {
                            "recovered": True,
                            "seconds": round(time.time() - since, 1),
                            "attempts": attempts,
                            "failed": failed,
                        }
                    )
                )
                sys.exit(0)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        last_error = str(exc)
    failed += 1
    time.sleep(1)
print(json.dumps({"recovered": False, "seconds": None, "attempts": attempts, "failed": failed, "error": last_error}))
sys.exit(1)
