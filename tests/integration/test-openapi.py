#!/usr/bin/env python3
"""doc/openapi.yaml is the HTTP API as kernelsup-http serves it: the document parses as OpenAPI 3.1, every
(method, path) of the route tables in src/http/api.c and src/http/e2b.c is in it and every one in it is in them,
and each documented route reaches its handler in the running server (a request with an unknown context or execution,
or a bad body, is answered by the route, never the server's own 404 not_found or 405)."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import harness_http  # noqa: E402

DOC = os.path.join(harness.SRCDIR, "doc", "openapi.yaml")
TABLES = [os.path.join(harness.SRCDIR, "src", "http", f) for f in ("api.c", "e2b.c")]
ROUTE = re.compile(r'\{\s*"(GET|POST|DELETE|PUT|PATCH)",\s*"(/[^"]*)",\s*\w+\s*\}')
METHODS = ("get", "post", "delete", "put", "patch")
MISSING_ID = "00000000-0000-4000-8000-000000000000"
# A body each route answers without side effects: refused, or about a context or execution that does not exist.
BODY = {("POST", "/v1/contexts"): {}, ("POST", "/contexts"): {"language": 5}, ("POST", "/execute"): {"code": 5}}


def documented(doc):
    """{(METHOD, pattern)}: the document's paths with each {param} as the route table's "*"."""
    out = set()
    for path, item in (doc.get("paths") or {}).items():
        for m in METHODS:
            if m in item:
                out.add((m.upper(), re.sub(r"\{[^}/]+\}", "*", path)))
    return out


def served():
    out = set()
    for t in TABLES:
        with open(t, encoding="utf-8") as f:
            out |= {(m, p) for m, p in ROUTE.findall(f.read())}
    return out


def run(tap):
    try:
        import yaml
    except ImportError:
        tap.skip_all("/usr/bin/python3 has no yaml (Debian's python3-yaml; ./run-tests installs it)")
    with open(DOC, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    tap.eq(doc.get("openapi"), "3.1.0", "doc/openapi.yaml is an OpenAPI 3.1 document")
    tap.ok(all(k in doc for k in ("info", "paths", "components")), "it has info, paths and components")
    docs, table = documented(doc), served()
    tap.ok(len(table) >= 20, "the route tables were read", repr(sorted(table)))
    tap.eq(sorted(table - docs), [], "every route the server has is documented")
    tap.eq(sorted(docs - table), [], "every documented route is one the server has")
    refs = re.findall(r'\$ref: "#/components/(\w+)/(\w+)"', open(DOC, encoding="utf-8").read())
    bad = [f"{k}/{n}" for k, n in refs if n not in (doc["components"].get(k) or {})]
    tap.eq(bad, [], "every $ref names a component that exists")

    why = harness_http.main_skip_reason()
    if why:
        return tap.skip("each documented route reaches its handler", why)
    d = harness.Daemon(tap).start()
    d.wait_state("default", "ready", timeout=60)
    front = harness_http.HttpFront(tap, d).start()
    for method, pattern in sorted(docs):
        path = pattern.replace("*", MISSING_ID if "/executions/" in pattern else "nosuch")
        body = BODY.get((method, pattern), {"code": "1"} if path.endswith("/execute") else None)
        if method == "POST" and body is None:
            body = {}
        r = front.request(method, path, body=body, timeout=60)
        code = r.error_code()
        tap.ok(r.status < 500 and code not in ("not_found", "method_not_allowed"),
               f"{method} {pattern}: answered by its route ({r.status} {code or ''})".rstrip(), repr(r))
    front.stop()
    d.stop()


harness.main(run)
