#!/usr/bin/env python3
"""test_errors -- ROBUSTNESS.md items 13-25 over a real socket against the real daemon.

Every bad request must get the right status and an OpenAI error JSON body, and
the good request that follows must still work (the daemon is unharmed).
usage: test_errors.py <inferd binary>
"""
import json
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check, expect_error

MODEL = "stories260K"
GOOD = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}

_d = None


def dmn(exe):
    global _d
    if _d is None:
        _d = D.Daemon(exe, args=["--max-body-bytes", "1048576", "--max-header-bytes", "8192",
                                 "--n-ctx", "256", "--read-timeout-s", "3"])
    return _d


def good(d):
    st, j = d.json("POST", "/v1/completions", GOOD)
    check(st == 200, "good request after the bad one failed: %d %r" % (st, j))
    check(j["choices"][0]["finish_reason"] in ("length", "stop"), j)
    check(j["usage"]["completion_tokens"] >= 1, j)


def post_raw(d, body, extra=""):
    if isinstance(body, str):
        body = body.encode()
    req = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           "Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra))
    return D.parse_response(d.raw(req.encode() + body))


def bad(d, obj, status=400, param="__any__", code="__any__"):
    if isinstance(obj, (bytes, str)):
        r = post_raw(d, obj)
    else:
        r = d.post("/v1/completions", obj)
    e = expect_error(r, status, param, code)
    return e


def with_good(**kw):
    g = dict(GOOD)
    g.update(kw)
    return g


# 13 -------------------------------------------------------------------------
def test_13_header_too_large(exe):
    d = dmn(exe)
    big = "X-Big: " + "a" * 10000 + "\r\n"
    r = D.parse_response(d.raw(("GET /v1/models HTTP/1.1\r\nHost: x\r\n%s\r\n" % big).encode()))
    expect_error(r, 431)
    good(d)


def test_13_body_too_large_content_length(exe):
    d = dmn(exe)
    # only the headers are sent: a 413 arriving proves the body was not awaited
    s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 50000000\r\n\r\n")
    r = D.parse_response(D.read_response_bytes(s))
    s.close()
    expect_error(r, 413)
    good(d)


def test_13_body_too_large_chunked(exe):
    d = dmn(exe)
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"a" * 65536
    sent = 0
    try:
        while sent < 1100000:
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        s.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server may answer and close before we are done
    data = D.read_response_bytes(s)
    s.close()
    expect_error(D.parse_response(data), 413)
    good(d)


def test_13_content_length_bad(exe):
    d = dmn(exe)
    for cl in ("-5", "abc", "1e3"):
        data = d.raw(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n"
                      "Connection: close\r\n\r\n{}" % cl).encode())
        st, hd, b = D.parse_response(data)
        check(st == 400, "Content-Length %s: status %d" % (cl, st))
    # duplicated (even when equal): request smuggling bait, rejected by us
    body = json.dumps(GOOD).encode()
    req = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
           "Content-Length: %d\r\nConnection: close\r\n\r\n" % (len(body), len(body)))
    e = expect_error(D.parse_response(d.raw(req.encode() + body)), 400)
    check("Content-Length" in e["message"], e)
    good(d)


def test_13_transfer_encoding(exe):
    """A Transfer-Encoding other than "chunked" left the body without an end:
    MHD waited for the client until the read deadline. RFC 9112 6.3: 400 and
    close, at once. "chunked" (any case) still works."""
    d = dmn(exe)
    body = json.dumps(GOOD).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    for te in (b"gzip", b"identity", b"gzip, chunked", b"chunked, chunked", b"chunked "):
        t0 = time.time()
        data = d.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Transfer-Encoding: %s\r\n\r\n" % te + chunked, timeout=5)
        e = expect_error(D.parse_response(data), 400)
        check("Transfer-Encoding" in e["message"], e)
        check(time.time() - t0 < 2, "TE %r: answered after %.1f s" % (te, time.time() - t0))
    # two Transfer-Encoding headers are a list: refused too
    data = d.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
                 timeout=5)
    expect_error(D.parse_response(data), 400)
    for te in (b"chunked", b"Chunked"):
        data = d.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Transfer-Encoding: %s\r\n\r\n" % te + chunked, timeout=10)
        st, hd, b = D.parse_response(data)
        check(st == 200 and json.loads(b.decode())["usage"]["completion_tokens"] >= 1,
              "chunked body (%r): %d %r" % (te, st, b[:200]))
    good(d)


# 14 -------------------------------------------------------------------------
def test_14_bad_json(exe):
    d = dmn(exe)
    for body in ('{"model":', '{"model": "x"} trailing', '[1, 2]', '"str"', '',
                 "[" * 100000 + "]" * 100000, '{"a":' * 100000 + "1" + "}" * 100000):
        bad(d, body, 400)
    good(d)


# 15 -------------------------------------------------------------------------
def test_15_wrong_types(exe):
    d = dmn(exe)
    bad(d, with_good(max_tokens="10"), 400, "max_tokens")
    bad(d, with_good(stream="true"), 400, "stream")
    bad(d, with_good(prompt={}), 400, "prompt")
    bad(d, with_good(temperature="hot"), 400, "temperature")
    bad(d, with_good(echo=1), 400, "echo")
    bad(d, with_good(stop=5), 400, "stop")
    bad(d, with_good(seed=1.5), 400, "seed")
    bad(d, with_good(model=7), 400, "model")
    bad(d, with_good(logit_bias=[1]), 400, "logit_bias")
    bad(d, with_good(stream_options={"include_usage": True}), 400, "stream_options")
    bad(d, with_good(suffix="x"), 400, "suffix")
    e = bad(d, with_good(model="no-such-model"), 404, "model", "model_not_found")
    check("no-such-model" in e["message"], e)
    good(d)


# 16 -------------------------------------------------------------------------
def test_16_ranges(exe):
    d = dmn(exe)
    for v in (0, -1, 2 ** 31, 2 ** 63 - 1):
        bad(d, with_good(max_tokens=v), 400, "max_tokens")
    bad(d, '{"model":"%s","prompt":"a","max_tokens":%d}' % (MODEL, 2 ** 63), 400)
    for v in (-1, 2.5):
        bad(d, with_good(temperature=v), 400, "temperature")
    bad(d, '{"model":"%s","prompt":"a","temperature":1e400}' % MODEL, 400)
    bad(d, '{"model":"%s","prompt":"a","temperature":NaN}' % MODEL, 400)
    for v in (0, 1.5, -0.1):
        bad(d, with_good(top_p=v), 400, "top_p")
    bad(d, with_good(top_k=-1), 400, "top_k")
    bad(d, with_good(min_p=1.5), 400, "min_p")
    bad(d, with_good(presence_penalty=3), 400, "presence_penalty")
    bad(d, with_good(frequency_penalty=-3), 400, "frequency_penalty")
    bad(d, with_good(repetition_penalty=0), 400, "repetition_penalty")
    bad(d, with_good(n=1000000000), 400, "n")
    bad(d, with_good(n=0), 400, "n")
    bad(d, '{"model":"%s","prompt":"a","n":1e9}' % MODEL, 400, "n")
    bad(d, with_good(best_of=1000000000), 400, "best_of")
    bad(d, with_good(n=2, best_of=1), 400, "best_of")
    good(d)


# 17 -------------------------------------------------------------------------
def test_17_logprobs_logit_bias(exe):
    d = dmn(exe)
    bad(d, with_good(logprobs=21), 400, "logprobs")
    bad(d, with_good(logprobs=-1), 400, "logprobs")
    bad(d, with_good(logit_bias={"512": 1}), 400, "logit_bias")      # n_vocab is 512
    bad(d, with_good(logit_bias={"-1": 1}), 400, "logit_bias")
    bad(d, with_good(logit_bias={"abc": 1}), 400, "logit_bias")
    bad(d, with_good(logit_bias={"1.5": 1}), 400, "logit_bias")
    bad(d, with_good(logit_bias={"5": 101}), 400, "logit_bias")
    bad(d, with_good(logit_bias={"5": "x"}), 400, "logit_bias")
    bad(d, with_good(stop_token_ids=[512]), 400, "stop_token_ids")
    good(d)


# 18 -------------------------------------------------------------------------
def test_18_token_prompt_range(exe):
    d = dmn(exe)
    for ids in ([-1], [1, 512], [2147483647], [1, 2.0], [[1, 2], [3, 99999]]):
        bad(d, with_good(prompt=ids), 400, "prompt")
    good(d)


# 19 -------------------------------------------------------------------------
def test_19_context_exceeded(exe):
    d = dmn(exe)
    for _ in range(3):
        e = bad(d, with_good(prompt="Once upon a time", max_tokens=252), 400, code="context_length_exceeded")
        check("256" in e["message"] and "252" in e["message"] and "257" in e["message"], e["message"])
    e = bad(d, with_good(prompt=list(range(3, 203)), max_tokens=100), 400, code="context_length_exceeded")
    check("200" in e["message"] and "100" in e["message"], e["message"])
    good(d)


# 20 -------------------------------------------------------------------------
def test_20_empty_and_huge_prompt(exe):
    d = dmn(exe)
    bad(d, with_good(prompt=""), 400, "prompt")
    bad(d, with_good(prompt=[]), 400, "prompt")
    bad(d, with_good(prompt=[[]]), 400, "prompt")
    bad(d, with_good(prompt=[""]), 400, "prompt")
    # a 900 KB prompt (under the 1 MiB body limit): refused fast, while a
    # concurrent good request is served normally
    huge = with_good(prompt="once upon a time " * 53000)
    res = {}

    def run_huge():
        t0 = time.time()
        res["r"] = d.post("/v1/completions", huge)
        res["t"] = time.time() - t0

    th = threading.Thread(target=run_huge)
    th.start()
    t0 = time.time()
    good(d)
    tg = time.time() - t0
    th.join()
    expect_error(res["r"], 400, "prompt", "context_length_exceeded")
    check(res["t"] < 5.0 * D.SLOW, "huge prompt took %.2f s" % res["t"])
    check(tg < 5.0 * D.SLOW, "good request stalled %.2f s" % tg)
    # over the body limit: 413
    expect_error(d.post("/v1/completions", with_good(prompt="x" * 1100000)), 413)
    good(d)


def test_20_tokenize_huge(exe):
    """/tokenize runs on the loop thread: a 3 MB text used to take seconds
    (and stall /health for over a second); now it is refused (400, over the
    1 MiB /tokenize limit) and a 1 MiB one is answered quickly."""
    d = D.Daemon(exe)  # the default 4 MiB body limit
    try:
        res = {}

        def run(text):
            t0 = time.time()
            res["r"] = d.post("/tokenize", {"prompt": text})
            res["t"] = time.time() - t0

        for text, want in (("x" * 3000000, 400), ("x" * 1048576, 200)):
            th = threading.Thread(target=run, args=(text,))
            th.start()
            worst = 0.0
            while th.is_alive():
                t0 = time.time()
                st, _ = d.json("GET", "/health")
                check(st == 200, "/health %d" % st)
                worst = max(worst, time.time() - t0)
                time.sleep(0.01)
            th.join()
            st, _, b = res["r"]
            if want == 400:
                expect_error(res["r"], 400, "prompt")
            else:
                check(st == 200, "tokenize 1 MiB: %d %r" % (st, b[:200]))
                j = json.loads(b.decode())
                check(j["count"] == len(j["tokens"]) and j["count"] > 1000, "count %r" % j["count"])
            check(res["t"] < 5.0 * D.SLOW, "/tokenize of %d bytes took %.2f s" % (len(text), res["t"]))
            check(worst < 1.0 * D.SLOW, "/health stalled %.2f s during /tokenize" % worst)
        st, j = d.json("POST", "/tokenize", {"prompt": "Once upon a time"})
        check(st == 200 and j["tokens"][0] == 1 and j["count"] == len(j["tokens"]), j)
    finally:
        d.close()


# 21 -------------------------------------------------------------------------
def test_21_bad_strings(exe):
    d = dmn(exe)
    bad(d, b'{"model":"stories260K","prompt":"\xff\xfe bad","max_tokens":2}', 400)
    bad(d, b'{"model":"stories260K","prompt":"\xc3","max_tokens":2}', 400)
    bad(d, '{"model":"stories260K","prompt":"a\\ud800b","max_tokens":2}', 400)
    bad(d, '{"model":"stories260K","prompt":"a\\u0000b","max_tokens":2}', 400)
    # a correct surrogate pair is fine
    st, j = d.json("POST", "/v1/completions",
                   json.loads('{"model":"stories260K","prompt":"a\\ud83d\\ude00b","max_tokens":2}'))
    check(st == 200, j)
    good(d)


# 23 -------------------------------------------------------------------------
def test_23_stop_lists(exe):
    d = dmn(exe)
    bad(d, with_good(stop=["a", "b", "c", "d", "e"]), 400, "stop")
    bad(d, with_good(stop=[""]), 400, "stop")
    bad(d, with_good(stop=""), 400, "stop")
    bad(d, with_good(stop="x" * 257), 400, "stop")
    bad(d, with_good(stop=["x" * 1000000]), 400, "stop")
    bad(d, with_good(stop=["ok", 5]), 400, "stop")
    good(d)


# 24 -------------------------------------------------------------------------
def test_24_routes_and_methods(exe):
    d = dmn(exe)
    expect_error(d.request("GET", "/nope"), 404)
    expect_error(d.request("GET", "/v1/completions"), 405)
    st, hd, _ = d.request("DELETE", "/health")
    check(st == 405 and "GET" in hd.get("allow", ""), (st, hd))
    # normalized paths reach the real route
    for p in ("//v1/completions", "/v1/./completions", "/x/../v1/completions",
              "/v1/%63ompletions", "/%2e%2e/v1/completions"):
        st, j = d.json("POST", p, GOOD)
        check(st == 200, "%s -> %d %r" % (p, st, j))
    for p in ("/health%00", "/v1/completions%00x", "/health%zz"):
        expect_error(d.request("GET", p), 400)
    good(d)


def test_24_auth_same_path(exe):
    key = "s3cret-key"
    d = D.Daemon(exe, env={"INFERD_API_KEY": key})
    try:
        auth = {"Authorization": "Bearer " + key}
        st, _, _ = d.request("GET", "/health")
        check(st == 200, "health needs no key: %d" % st)
        for p in ("/metrics", "/v1/../metrics", "//metrics", "/%2e%2e/metrics", "/health/../metrics",
                  "/v1/models", "/v1/completions", "/nope"):
            r = d.request("GET", p)
            expect_error(r, 401)
        expect_error(d.request("GET", "/metrics", headers={"Authorization": "Bearer wrong"}), 401)
        expect_error(d.request("GET", "/metrics", headers={"Authorization": key}), 401)
        for p in ("/metrics", "/v1/../metrics", "//metrics", "/%2e%2e/metrics"):
            st, _, b = d.request("GET", p, headers=auth)
            check(st == 200 and b"inferd_requests_total" in b, "%s with key: %d" % (p, st))
        # a NUL smuggled in the path does not reach /health's no-auth rule
        expect_error(d.request("GET", "/health%00/../metrics"), 400)
        data = d.raw(b"GET /health\x00/../metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        st, _, b = D.parse_response(data) if data else (400, {}, b"")
        check(st == 400 or (st == 200 and b"inferd_requests_total" not in b), (st, b[:200]))
        st, j = d.json("POST", "/v1/completions", GOOD, headers=auth)
        check(st == 200, j)
    finally:
        d.close()


# 22 -------------------------------------------------------------------------
def test_22_special_token_text(exe):
    d = D.Daemon(exe, model=D.model_path("tiny-qwen2-Q4_K_M.gguf"))
    try:
        st, j = d.json("POST", "/tokenize", {"prompt": "<|im_start|>", "add_special": False})
        check(st == 200, j)
        plain = j["tokens"]
        st, j = d.json("POST", "/tokenize", {"prompt": "<|im_start|>", "add_special": False,
                                             "parse_special": True})
        check(st == 200 and len(j["tokens"]) == 1, j)
        special = j["tokens"][0]
        check(special not in plain and len(plain) > 1, (plain, special))
        # the completion counts the plain-text tokens
        st, j = d.json("POST", "/v1/completions",
                       {"model": "tiny-qwen2-Q4_K_M", "prompt": "<|im_start|>", "max_tokens": 1,
                        "temperature": 0, "add_special_tokens": False})
        check(st == 200 and j["usage"]["prompt_tokens"] == len(plain), j)
    finally:
        d.close()


# 25 -------------------------------------------------------------------------
def test_25_partial_utf8(exe):
    d = dmn(exe)
    st, j = d.json("POST", "/tokenize", {"prompt": "\u20ac\u00e9", "add_special": False})
    check(st == 200, j)
    ids = [t for t in j["tokens"]]
    # byte tokens only (the vocab has no euro sign): force generation to pick
    # among them so characters are split across tokens, valid or not
    bias = {str(t): 100 for t in set(ids)}
    for stream in (False, True):
        req = with_good(max_tokens=24, temperature=1.0, seed=7, logit_bias=bias, logprobs=2,
                        stream=stream)
        st, hd, b = d.post("/v1/completions", req)
        check(st == 200, b[:300])
        b.decode("utf-8")  # strict: the whole body is valid UTF-8
        if stream:
            text = ""
            for ev in D.sse_events(b):
                if ev == "[DONE]":
                    continue
                c = json.loads(ev)
                for ch in c["choices"]:
                    text += ch["text"]
                    for t in (ch["logprobs"] or {}).get("tokens", []):
                        check(isinstance(t, str), t)
        else:
            j = json.loads(b)
            text = j["choices"][0]["text"]
            for t in j["choices"][0]["logprobs"]["tokens"]:
                check(isinstance(t, str), t)
        check(len(text) > 0, "no text")
        text.encode("utf-8")
    good(d)


def test_slowloris(exe):
    d = dmn(exe)  # read_timeout_s 3
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    t0 = time.time()
    closed = False
    try:
        for c in b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 20:
            s.sendall(bytes([c]))
            time.sleep(0.25)
            if time.time() - t0 > 8:
                break
        s.settimeout(5)
        closed = s.recv(100) == b""
    except OSError:
        closed = True
    s.close()
    check(closed, "slow client not closed")
    check(time.time() - t0 < 9, "slow client held on for %.1f s" % (time.time() - t0))
    good(d)


def main():
    tests = [test_13_header_too_large, test_13_body_too_large_content_length,
             test_13_body_too_large_chunked, test_13_content_length_bad, test_13_transfer_encoding,
             test_14_bad_json,
             test_15_wrong_types, test_16_ranges, test_17_logprobs_logit_bias,
             test_18_token_prompt_range, test_19_context_exceeded, test_20_empty_and_huge_prompt,
             test_20_tokenize_huge,
             test_21_bad_strings, test_23_stop_lists, test_24_routes_and_methods,
             test_24_auth_same_path, test_22_special_token_text, test_25_partial_utf8,
             test_slowloris]
    try:
        D.run(tests, sys.argv)
    finally:
        if _d:
            log = _d.log()
            rc = _d.stop()
            if rc != 0:
                print("daemon exit status %d\n%s" % (rc, log[-3000:]))
                sys.exit(1)


if __name__ == "__main__":
    main()
