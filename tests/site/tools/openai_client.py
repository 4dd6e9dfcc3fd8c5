"""The official openai package against a vLLM replica: completion, chat, streaming, and no key.

Runs on a lab host with the vLLM venv's python (it ships the openai package):
    python openai_client.py BASE_URL MODEL PROMPT MAX_TOKENS   (the key comes from OPENAI_API_KEY)
Prints one JSON object; tests/site/verify_vllm.yml compares token_ids with HF transformers' greedy output.
"""

import json
import os
import sys

import openai

base_url, model, prompt, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = openai.OpenAI(base_url=base_url, api_key=os.environ["OPENAI_API_KEY"], timeout=120, max_retries=0)
result = {}

completion = client.completions.create(
    model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, extra_body={"return_token_ids": True}
)
choice = completion.choices[0]
result["completion"] = {
    "text": choice.text,
    "token_ids": list(getattr(choice, "token_ids", None) or choice.model_extra.get("token_ids") or []),
    "prompt_token_ids": list(
        getattr(choice, "prompt_token_ids", None) or choice.model_extra.get("prompt_token_ids") or []
    ),
}

chat = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0
)
result["chat"] = {"text": chat.choices[0].message.content, "finish_reason": chat.choices[0].finish_reason}

pieces = []
for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True):
    if chunk.choices:
        pieces.append(chunk.choices[0].text)
result["stream"] = {"text": "".join(pieces), "chunks": len(pieces)}

keyless = openai.OpenAI(base_url=base_url, api_key="not-the-key", timeout=30, max_retries=0)
try:
    keyless.completions.create(model=model, prompt=prompt, max_tokens=1)
    result["wrong_key"] = {"status": 200}
except openai.APIStatusError as exc:
    result["wrong_key"] = {"status": exc.status_code}
print(json.dumps(result))
