#!/usr/bin/env python3
"""An agent that asks Toolgate to run a tool, with nothing but Python's standard library.

It talks to the Kubernetes API directly (REST over HTTPS, a bearer token): it creates a ToolCall,
follows it with a watch on that one object until a terminal phase, and prints the outcome and
status.result. Ctrl-C (or SIGTERM) while it waits deletes the ToolCall, so Toolgate withdraws the
approval request and nobody reviews a call that nobody waits for.

    python3 agent.py issue_refund \
        --args '{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}' \
        --reason 'The customer was charged twice for order 8812.' --waiting-limit 30m

Where it connects, and as whom:

- In a Pod: the Pod's ServiceAccount (its token, the cluster's CA and the namespace, from
  /var/run/secrets/kubernetes.io/serviceaccount) and the API server of KUBERNETES_SERVICE_HOST.
- Outside: TOOLGATE_SERVER (https://host:port), TOOLGATE_TOKEN or TOOLGATE_TOKEN_FILE (a
  ServiceAccount token, e.g. from `kubectl create token`), TOOLGATE_CA_FILE (the API server's CA;
  the system's trusted CAs when unset) and TOOLGATE_NAMESPACE (or --namespace).

A token file is read again before every request, as a projected token is rotated by the kubelet.

Output: progress on stderr, one line per phase; the outcome on stdout. Exit codes, as
`kubectl toolcall run`: 0 Succeeded, 1 an error, 2 a usage error, 3 Failed, 4 Denied, 5 Expired,
6 ApprovalUnavailable, 7 Cancelled, 8 Rejected, 130 interrupted (the ToolCall was deleted).
"""

import argparse
import datetime
import http.client
import json
import os
import re
import signal
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

GROUP_VERSION = "toolgate.dev/v1alpha1"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# Exit code per terminal phase, as `kubectl toolcall run` (docs/cli.md).
EXIT_CODES = {
    "Succeeded": 0,
    "Failed": 3,
    "Denied": 4,
    "Expired": 5,
    "ApprovalUnavailable": 6,
    "Cancelled": 7,
    "Rejected": 8,
}
EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130

# A watch is asked to end after WATCH_SECONDS and reopened from the last resourceVersion seen; a
# connection silent for longer than READ_TIMEOUT is taken as broken and reopened the same way.
WATCH_SECONDS = 240
READ_TIMEOUT = WATCH_SECONDS + 30


class APIError(Exception):
    """An answer of the API server other than 2xx, with its Status object's reason and message."""

    def __init__(self, code, reason, message):
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message = code, reason, message


class Gone(Exception):
    """The ToolCall was deleted (or replaced) by someone else before it ended."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM."""


def fail(code, message):
    print(f"agent.py: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


# ------------------------------------------------------------------------------------------------
# The connection: server, CA, token and namespace.


class Cluster:
    def __init__(self, server, ca_file, token, token_file, namespace):
        self.server = server.rstrip("/")
        self.namespace = namespace
        self._token, self._token_file = token, token_file
        self._tls = ssl.create_default_context(cafile=ca_file)

    @classmethod
    def from_environment(cls, namespace):
        env = os.environ
        server, ca_file = env.get("TOOLGATE_SERVER"), env.get("TOOLGATE_CA_FILE")
        token, token_file = env.get("TOOLGATE_TOKEN"), env.get("TOOLGATE_TOKEN_FILE")
        namespace = namespace or env.get("TOOLGATE_NAMESPACE")
        if not server:
            # In a Pod: its ServiceAccount and the cluster's API server.
            host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                fail(EXIT_USAGE, "no API server: set TOOLGATE_SERVER (https://host:port), or run in a Pod")
            server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
            ca_file = ca_file or os.path.join(SA_DIR, "ca.crt")
            if not token and not token_file:
                token_file = os.path.join(SA_DIR, "token")
            if not namespace and os.path.exists(os.path.join(SA_DIR, "namespace")):
                with open(os.path.join(SA_DIR, "namespace")) as f:
                    namespace = f.read().strip()
        if not token and not token_file:
            fail(EXIT_USAGE, "no credentials: set TOOLGATE_TOKEN or TOOLGATE_TOKEN_FILE to a ServiceAccount token "
                 "(kubectl -n NAMESPACE create token SERVICEACCOUNT)")
        if not namespace:
            fail(EXIT_USAGE, "no namespace: pass --namespace or set TOOLGATE_NAMESPACE")
        if not server.startswith("https://"):
            fail(EXIT_USAGE, f"TOOLGATE_SERVER is {server!r}: give the API server's https:// URL, e.g. https://127.0.0.1:6443")
        return cls(server, ca_file, token, token_file, namespace)

    def _bearer(self):
        if self._token:
            return self._token
        with open(self._token_file) as f:
            return f.read().strip()

    def toolcalls(self, name="", **query):
        path = f"{self.server}/apis/{GROUP_VERSION}/namespaces/{urllib.parse.quote(self.namespace)}/toolcalls"
        if name:
            path += "/" + urllib.parse.quote(name)
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return path

    def open(self, method, url, body=None, timeout=30):
        """Sends a request and returns the open response; raises APIError for any non-2xx answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self._bearer())
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            return urllib.request.urlopen(req, timeout=timeout, context=self._tls)
        except urllib.error.HTTPError as e:
            raise api_error(e) from None

    def request(self, method, url, body=None):
        with self.open(method, url, body) as resp:
            return json.load(resp)


def api_error(e):
    """Reads the Status object of an error answer (its message names what is missing)."""
    try:
        status = json.load(e)
        return APIError(e.code, status.get("reason", ""), status.get("message", ""))
    except ValueError:
        return APIError(e.code, e.reason, "")


# ------------------------------------------------------------------------------------------------
# Creating the ToolCall.


def generate_name(tool):
    """The prefix of a generated name, as pkg/toolcall makes it: issue_refund gives issue-refund-."""
    name = re.sub(r"[^a-z0-9]", "-", tool.lower()).strip("-")[:40].rstrip("-")
    return (name or "toolcall") + "-"


def create(cluster, args):
    """Creates the ToolCall and returns it. With --name, a ToolCall of that name that asks for the
    same call (an earlier run of the same task, e.g. before a crash) is returned instead, so a
    repeated run never asks a human twice."""
    meta = {"name": args.name} if args.name else {"generateName": generate_name(args.tool)}
    if args.label:
        meta["labels"] = dict(args.label)
    spec = {"tool": args.tool, "arguments": args.arguments, "waitingLimit": args.waiting_limit}
    if args.timeout:
        spec["timeout"] = args.timeout
    if args.reason:
        spec["reason"] = args.reason
    body = {"apiVersion": GROUP_VERSION, "kind": "ToolCall", "metadata": meta, "spec": spec}
    try:
        return cluster.request("POST", cluster.toolcalls(), body)
    except APIError as e:
        if e.code != 409 or not args.name:
            raise
    existing = cluster.request("GET", cluster.toolcalls(args.name))
    theirs = existing.get("spec", {})
    if any(theirs.get(k) != spec.get(k) for k in ("tool", "arguments", "waitingLimit", "timeout", "reason")):
        fail(EXIT_ERROR, f"a ToolCall named {args.name} already exists in namespace {cluster.namespace} and asks for "
             "another call: choose another --name (one per task), or leave it out for a generated one")
    progress(existing, "resumed: this call was created earlier")
    return existing


# ------------------------------------------------------------------------------------------------
# Waiting: a watch on that one object, from the resourceVersion of the create's answer.


def terminal(tc):
    return tc.get("status", {}).get("phase") in EXIT_CODES


def deadline_of(tc):
    """A minute past the ToolCall's waiting limit, counted from its creation (wall clock, seconds):
    the controller ends every call within its limit, so a call still open then has no manager."""
    created = datetime.datetime.fromisoformat(tc["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    return created.timestamp() + seconds(tc["spec"]["waitingLimit"]) + 60


def wait(cluster, tc, deadline):
    """Follows the ToolCall until a terminal phase and returns it; gives up at deadline (a time.time()).
    Reopens the watch from the last resourceVersion seen when it ends or breaks; reads the object
    afresh when the API server no longer has that version (410 Gone). Raises Gone if the ToolCall is
    deleted meanwhile."""
    last, rv, backoff = tc, tc["metadata"]["resourceVersion"], 1
    while not terminal(last):
        left = deadline - time.time()
        if left <= 0:
            fail(EXIT_ERROR, f"ToolCall {last['metadata']['name']} has not ended a minute past its waiting limit; "
                 "is the Toolgate manager running? It was left as it is")
        url = cluster.toolcalls(watch="1", fieldSelector="metadata.name=" + last["metadata"]["name"],
                                resourceVersion=rv, allowWatchBookmarks="true",
                                timeoutSeconds=str(int(min(WATCH_SECONDS, left)) + 1))
        try:
            with cluster.open("GET", url, timeout=READ_TIMEOUT) as stream:
                backoff = 1
                for line in stream:  # one JSON event a line
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        raise APIError(obj.get("code", 0), obj.get("reason", ""), obj.get("message", ""))
                    rv = obj["metadata"]["resourceVersion"]
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED" or obj["metadata"]["uid"] != last["metadata"]["uid"]:
                        raise Gone()
                    if obj.get("status", {}).get("phase") != last.get("status", {}).get("phase"):
                        progress(obj)
                    last = obj
                    if terminal(last):
                        return last
        except APIError as e:
            if e.code == 410:  # too old: read the object again, and watch from there
                fresh = refresh(cluster, last)
                if fresh.get("status", {}).get("phase") != last.get("status", {}).get("phase"):
                    progress(fresh)
                last, rv = fresh, fresh["metadata"]["resourceVersion"]
                continue
            if e.code not in (429, 500, 502, 503, 504):
                raise
            backoff = pause(backoff, e)
        except (OSError, http.client.HTTPException, ValueError) as e:  # refused, reset, timed out, cut
            backoff = pause(backoff, e)
    return last


def refresh(cluster, last):
    try:
        tc = cluster.request("GET", cluster.toolcalls(last["metadata"]["name"]))
    except APIError as e:
        if e.code == 404:
            raise Gone() from None
        raise
    if tc["metadata"]["uid"] != last["metadata"]["uid"]:
        raise Gone()
    return tc


def pause(backoff, why):
    print(f"agent.py: the watch broke ({why}); reopening in {backoff}s", file=sys.stderr, flush=True)
    time.sleep(backoff)
    return min(backoff * 2, 30)


def withdraw(cluster, tc):
    """Deletes the ToolCall (only this one: a UID precondition), so Toolgate cancels its approval
    request, or deletes its Job if it already runs. Returns what to tell the user."""
    name = tc["metadata"]["name"]
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": tc["metadata"]["uid"]}}
    try:
        cluster.request("DELETE", cluster.toolcalls(name), body)
    except APIError as e:
        if e.code in (404, 409):  # already gone, or another object took the name
            return f"ToolCall {name} was already gone"
        return f"could not delete ToolCall {name} ({e}); delete it to withdraw its approval request"
    except (OSError, http.client.HTTPException) as e:
        return f"could not delete ToolCall {name} ({e}); delete it to withdraw its approval request"
    return f"deleted ToolCall {name}: its approval request is withdrawn"


# ------------------------------------------------------------------------------------------------
# Output.


def progress(tc, note=""):
    status = tc.get("status", {})
    phase = status.get("phase") or "Pending"
    details = [note] if note else []
    if phase == "AwaitingApproval":
        details.append(f"waiting for a human (request {status.get('requestID', '?')}, "
                       f"decision due by {status.get('deadlineAt', '?')})")
    elif phase == "Running":
        details.append(f"approved; job {status.get('jobName', '?')} runs the tool")
    line = f"toolcall {tc['metadata']['name']}: {phase}"
    print(line + (": " + ", ".join(details) if details else ""), file=sys.stderr, flush=True)


def report(tc):
    """Prints the outcome on stdout and returns the exit code."""
    status = tc.get("status", {})
    phase = status.get("phase")
    print(f"toolcall {tc['metadata']['name']}: {phase} (reason {status.get('reason', '')})")
    if phase != "Succeeded" and status.get("message"):
        print(f"message: {status['message']}")
    note = status.get("decision", {}).get("note")
    if note:
        print(f"approver note: {note}")
    if phase in ("Succeeded", "Failed") and "result" in status:
        print(f"result: {status['result']}")
    sys.stdout.flush()
    return EXIT_CODES[phase]


# ------------------------------------------------------------------------------------------------
# Arguments and signals.

GO_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:h|m|s|ms))+$")


def duration(text):
    if not GO_DURATION.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 10m or 1h30m")
    return text


def seconds(text):
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text))


def json_object(text):
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("the arguments must be a JSON object, e.g. '{}' for none")
    return value


def label(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def parse(argv):
    p = argparse.ArgumentParser(description="Ask Toolgate to run a tool, after a human approves it.")
    p.add_argument("tool", help="the toolName of a Tool in the namespace, e.g. issue_refund")
    p.add_argument("--args", dest="arguments", type=json_object, required=True, help="the arguments, a JSON object")
    p.add_argument("--waiting-limit", type=duration, default="10m",
                   help="spec.waitingLimit: how long this agent waits in total (default 10m)")
    p.add_argument("--timeout", type=duration, help="spec.timeout: the approval timeout asked of the provider")
    p.add_argument("--reason", help="spec.reason: why the agent makes the call (approvers see it as the agent's claim)")
    p.add_argument("--name", help="the ToolCall's name, one per task: running again with the same name "
                   "resumes that call instead of asking again (default: generated)")
    p.add_argument("-l", "--label", type=label, action="append", help="a KEY=VALUE label on the ToolCall")
    p.add_argument("-n", "--namespace", help="default: TOOLGATE_NAMESPACE, or the Pod's namespace")
    return p.parse_args(argv)


class Signals:
    """Ctrl-C and SIGTERM raise Interrupted, but not while the ToolCall is being created: then the
    interruption is held until its name is known, so that it can be deleted."""

    def __init__(self):
        self.held, self.pending = False, False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)  # also when the parent process ignored SIGINT

    def _handle(self, signum, frame):
        if self.held:
            self.pending = True
        else:
            raise Interrupted()

    def hold(self):
        self.held = True

    def release(self):
        self.held = False
        if self.pending:
            raise Interrupted()


def main(argv):
    args = parse(argv)
    signals = Signals()
    cluster = Cluster.from_environment(args.namespace)
    signals.hold()
    try:
        tc = create(cluster, args)
    except APIError as e:
        # 403: the message names the missing grant (the agent role, or call on the tool).
        fail(EXIT_ERROR, f"the API server refused the ToolCall: {e}")
    except (OSError, http.client.HTTPException, ValueError) as e:
        fail(EXIT_ERROR, f"cannot reach the API server at {cluster.server}: {e}")
    try:
        if not tc.get("status", {}).get("phase"):
            progress(tc, f"created, waiting at most {args.waiting_limit}")
        signals.release()
        done = wait(cluster, tc, deadline_of(tc))
    except Interrupted:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)  # a second Ctrl-C ends the agent at once
        print(f"agent.py: interrupted; {withdraw(cluster, tc)}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except Gone:
        fail(EXIT_ERROR, f"ToolCall {tc['metadata']['name']} was deleted by someone else before it ended")
    except APIError as e:
        fail(EXIT_ERROR, f"watching ToolCall {tc['metadata']['name']}: {e}")
    return report(done)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
