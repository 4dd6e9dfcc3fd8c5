# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for a model_fanout job started with async, printing its progress as it goes."""

from __future__ import annotations

import base64
import json
import time

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpufleet.inference.plugins.module_utils._model_fanout import progress_text, status_path_of

display = Display()
ASYNC_STATUS_KEYS = (
    "ansible_job_id",
    "started",
    "finished",
    "results_file",
    "stdout",
    "stderr",
    "stdout_lines",
    "stderr_lines",
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = False

    def _async_status(self, jid, mode, task_vars):
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(
            module_name="ansible.legacy.async_status",
            module_args={"jid": jid, "mode": mode, "_async_dir": async_dir},
            task_vars=task_vars,
        )

    def _status(self, path, task_vars):
        """The job's status document, or None while it has not written one."""
        read = self._execute_module(module_name="ansible.legacy.slurp", module_args={"src": path}, task_vars=task_vars)
        if read.get("failed"):
            return None
        try:
            return json.loads(base64.b64decode(read["content"]))
        except (KeyError, ValueError):
            return None

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(
            argument_spec={
                "jid": {"type": "str", "required": True},
                "path": {"type": "path", "required": True},
                "status_path": {"type": "path", "default": ""},
                "timeout": {"type": "int", "required": True},
                "interval": {"type": "int", "default": 10},
            },
        )
        if args["interval"] < 1 or args["timeout"] < 1:
            raise AnsibleError("model_fanout_wait: interval and timeout must be at least 1 s")
        host = task_vars.get("inventory_hostname", "?")
        status_path = args["status_path"] or status_path_of(args["path"])
        deadline = time.monotonic() + args["timeout"]
        last = None
        while True:
            job = self._async_status(args["jid"], "status", task_vars)
            if job.get("finished") or job.get("failed"):
                break
            status = self._status(status_path, task_vars)
            if status is not None:
                last = progress_text(status)
                # On stderr, as progress goes, so that a machine-readable stdout (the json
                # callback) stays one document.
                display.display("%s: %s" % (host, last), stderr=True)
            if time.monotonic() > deadline:
                result.update(
                    failed=True,
                    msg="the model fan-out on %s did not end within %d s (last progress: %s); its job %s still runs"
                    % (host, args["timeout"], last or "none written", args["jid"]),
                )
                return result
            time.sleep(args["interval"])
        self._async_status(args["jid"], "cleanup", task_vars)
        # The result is the module's: async_status' own keys go.
        for key in ASYNC_STATUS_KEYS:
            job.pop(key, None)
        if not job.get("failed"):
            display.display("%s: done, %s" % (host, progress_text(job)), stderr=True)
        result.update(job)
        return result
