#!/usr/bin/env python3
"""test_completions -- /v1/completions and the other endpoints, as curl would use them.

Checks the response shapes of API.md, streaming (SSE framing, [DONE], usage
chunk), that the output equals `inferd generate` for the same settings and
seed, n / echo / logprobs / stop / logit_bias / seed semantics, token-id
prompts, /tokenize, /detokenize, /v1/models, /metrics, response_format.
usage: test_completions.py <inferd binary>
"""
import datetime
import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
import uuid

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check, expect_error

MODEL = "stories260K"
PROMPT = "Once upon a time"

_d = None


def dmn(exe):
    global _d
    if _d is None:
        _d = D.Daemon(exe, args=["--n-ctx", "512"])
    return _d


def cmpl(d, **kw):
    req = {"model": MODEL, "prompt": PROMPT}
    req.update(kw)
    st, hd, b = d.post("/v1/completions", req)
    check(st == 200, "status %d: %r" % (st, b[:400]))
    check(hd["content-type"].startswith("text/event-stream" if kw.get("stream") else "application/json"),
          hd["content-type"])
    if kw.get("stream"):
        return D.sse_events(b)
    return json.loads(b)


def generate(exe, *args):
    out = subprocess.run([exe, "generate", "--model", D.model_path(), "--json"] + list(args),
                         capture_output=True, timeout=120)
    check(out.returncode == 0, "generate failed: %r" % out.stderr[-500:])
    return json.loads(out.stdout)


def stream_text(events):
    """-> ({index: text}, {index: finish_reason}, chunks)"""
    check(events[-1] == "[DONE]", "no [DONE] at the end: %r" % events[-1:])
    texts, fins, chunks = {}, {}, []
    for e in events[:-1]:
        c = json.loads(e)
        chunks.append(c)
        for ch in c["choices"]:
            i = ch["index"]
            check(i not in fins, "chunk after finish_reason for choice %d" % i)
            texts[i] = texts.get(i, "") + ch["text"]
            if ch["finish_reason"] is not None:
                fins[i] = ch["finish_reason"]
    return texts, fins, chunks


def test_shape_non_stream(exe):
    d = dmn(exe)
    j = cmpl(d, max_tokens=12, temperature=0)
    check(j["id"].startswith("cmpl-") and j["object"] == "text_completion", j)
    check(isinstance(j["created"], int) and j["model"] == MODEL, j)
    check(len(j["choices"]) == 1, j)
    c = j["choices"][0]
    check(c["index"] == 0 and c["logprobs"] is None and c["finish_reason"] == "length", c)
    check(isinstance(c["text"], str) and len(c["text"]) > 0, c)
    u = j["usage"]
    check(u["completion_tokens"] == 12 and u["prompt_tokens"] == 5, u)  # BOS + 4 tokens
    check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u)
    j2 = cmpl(d, max_tokens=12, temperature=0)
    check(j2["choices"][0]["text"] == c["text"] and j2["id"] != j["id"], "greedy not repeatable")


def test_matches_generate(exe):
    d = dmn(exe)
    g = generate(exe, "--prompt", PROMPT, "--max-tokens", "40")
    j = cmpl(d, max_tokens=40, temperature=0)
    check(j["choices"][0]["text"] == g["text"], "greedy differs:\n%r\n%r" % (j["choices"][0]["text"], g["text"]))
    check(j["usage"]["prompt_tokens"] == len(g["prompt_tokens"]), (j["usage"], g["prompt_tokens"]))
    ev = cmpl(d, max_tokens=40, temperature=0, stream=True)
    texts, fins, _ = stream_text(ev)
    check(texts[0] == g["text"], "streamed greedy differs")
    # sampled, same seed and knobs
    args = ["--prompt", PROMPT, "--max-tokens", "40", "--temperature", "0.9", "--top-k", "40",
            "--top-p", "0.95", "--seed", "1234"]
    g = generate(exe, *args)
    j = cmpl(d, max_tokens=40, temperature=0.9, top_k=40, top_p=0.95, seed=1234)
    check(j["choices"][0]["text"] == g["text"], "sampled differs:\n%r\n%r" % (j["choices"][0]["text"], g["text"]))
    # choice i of n uses seed + i
    g2 = generate(exe, *(args[:-1] + ["1235"]))
    j = cmpl(d, max_tokens=40, temperature=0.9, top_k=40, top_p=0.95, seed=1234, n=2)
    check(j["choices"][0]["text"] == g["text"] and j["choices"][1]["text"] == g2["text"], "n=2 seeds")


def test_stream(exe):
    d = dmn(exe)
    ev = cmpl(d, max_tokens=20, temperature=0, stream=True)
    texts, fins, chunks = stream_text(ev)
    check(len(chunks) >= 2, "tokens not streamed one by one: %d chunks" % len(chunks))
    check(fins == {0: "length"}, fins)
    check(len({c["id"] for c in chunks}) == 1, "ids differ")
    for c in chunks:
        check(c["object"] == "text_completion" and c["model"] == MODEL and "usage" not in c, c)
    j = cmpl(d, max_tokens=20, temperature=0)
    check(texts[0] == j["choices"][0]["text"], "stream != non-stream")
    # include_usage: usage null on every chunk, then one chunk with choices [] and usage
    ev = cmpl(d, max_tokens=7, temperature=0, stream=True, stream_options={"include_usage": True})
    texts, fins, chunks = stream_text(ev)
    for c in chunks[:-1]:
        check("usage" in c and c["usage"] is None, c)
    last = chunks[-1]
    check(last["choices"] == [] and last["usage"]["completion_tokens"] == 7
          and last["usage"]["prompt_tokens"] == 5 and last["usage"]["total_tokens"] == 12, last)


def test_stream_incremental(exe):
    """Events reach the client as they are produced (chunked SSE, flushed).

    Proof without a time bound: as soon as the first event has arrived, the
    test holds the engine (the test-only hook INFERD_FAULT_ENGINE_STALL,
    engine/fault.h: the engine loop blocks while a file exists); once the
    daemon logs that it is held, the response must still be open -- no
    [DONE] -- while events are already here, and it must finish when the
    hold is lifted. A server that buffers the response sends no event before
    its generation has ended, so every attempt of it ends with [DONE]
    already sent: it fails. (The old check, ">= 3 reads of 200 fast tokens",
    failed on a loaded machine when the client slept through the ~30 ms the
    tokens took, and a buffering server could pass it when its write was
    split.) An attempt proves nothing when the client read the first event
    so late that the generation had ended before the hold: it is repeated,
    up to ATTEMPTS times. Builds without fault hooks (release) keep the
    weaker read-count check, with the same repeats."""
    import socket
    import tempfile
    import time
    ATTEMPTS = 5
    tmpdir = tempfile.mkdtemp(prefix="inferd-stream-")
    hold = os.path.join(tmpdir, "hold")
    # the longest generation n_ctx allows: the hold has that long to land
    d = D.Daemon(exe, args=["--n-ctx", "512"], env={"INFERD_FAULT_ENGINE_STALL": hold})
    hooks = "fault hook:" in d.log()
    body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": 500, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()

    def attempt():
        """1: streamed; 0: inconclusive (the generation ended first)."""
        s = socket.create_connection(("127.0.0.1", d.port), timeout=30 * D.SLOW)
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
            buf, reads = b"", 0

            def more(timeout=None):
                nonlocal buf, reads
                s.settimeout(timeout if timeout is not None else 30 * D.SLOW)
                try:
                    x = s.recv(65536)
                except socket.timeout:
                    check(timeout is not None, "no data for %.0f s: %r" % (30 * D.SLOW, buf[-300:]))
                    return
                check(x, "connection closed before [DONE]: %r" % buf[-300:])
                buf += x
                reads += 1

            while b"data: {" not in buf:
                more()
            if not hooks:
                while b"data: [DONE]" not in buf:
                    more()
                return 1 if reads >= 3 else 0
            held = d.log().count("engine loop stalled")
            open(hold, "w").close()
            try:
                # wait until the engine is held (or the response ended first)
                t_end = time.monotonic() + 60 * D.SLOW
                while d.log().count("engine loop stalled") == held and b"data: [DONE]" not in buf:
                    check(time.monotonic() < t_end, "the hold did not land:\n%s" % d.log()[-2000:])
                    more(0.01)
                # what was sent before the hold arrives; [DONE] cannot be sent while held
                t_end = time.monotonic() + 0.2 * D.SLOW
                while time.monotonic() < t_end and b"data: [DONE]" not in buf:
                    more(0.02)
                streamed = b"data: [DONE]" not in buf
            finally:
                os.unlink(hold)
            while b"data: [DONE]" not in buf:
                more()
            return 1 if streamed else 0
        finally:
            s.close()

    try:
        ok = 0
        for _ in range(ATTEMPTS):
            ok = attempt()
            if ok:
                break
        check(ok, "in %d attempts the first event never arrived before the response was complete:"
              " the stream is buffered, not flushed per event" % ATTEMPTS)
    finally:
        rc = d.stop()
        if os.path.exists(hold):
            os.unlink(hold)
        os.rmdir(tmpdir)
        check(rc == 0, "daemon exit status %d" % rc)


def test_n_and_prompts(exe):
    d = dmn(exe)
    j = cmpl(d, max_tokens=8, temperature=0, n=3)
    t = [c["text"] for c in j["choices"]]
    check([c["index"] for c in j["choices"]] == [0, 1, 2] and t[0] == t[1] == t[2], t)
    check(j["usage"]["completion_tokens"] == 24 and j["usage"]["prompt_tokens"] == 5, j["usage"])
    j = cmpl(d, max_tokens=8, temperature=1.0, n=3, seed=5)
    j2 = cmpl(d, max_tokens=8, temperature=1.0, n=3, seed=5)
    check([c["text"] for c in j["choices"]] == [c["text"] for c in j2["choices"]], "seeded n=3 not reproducible")
    check(len({c["text"] for c in j["choices"]}) > 1, "n=3 sampled choices all equal")
    # several prompts: one choice per prompt (x n), in order
    solo = [cmpl(d, prompt=p, max_tokens=6, temperature=0)["choices"][0]["text"]
            for p in ("Once upon a time", "The cat")]
    j = cmpl(d, prompt=["Once upon a time", "The cat"], max_tokens=6, temperature=0, n=2)
    check([c["text"] for c in j["choices"]] == [solo[0], solo[0], solo[1], solo[1]], j["choices"])
    ev = cmpl(d, prompt=["Once upon a time", "The cat"], max_tokens=6, temperature=0, stream=True)
    texts, fins, _ = stream_text(ev)
    check(texts == {0: solo[0], 1: solo[1]} and fins == {0: "length", 1: "length"}, (texts, fins))


def test_token_prompts(exe):
    d = dmn(exe)
    st, j = d.json("POST", "/tokenize", {"prompt": PROMPT})
    check(st == 200 and j["count"] == len(j["tokens"]) == 5, j)
    ids = j["tokens"]
    st, j2 = d.json("POST", "/tokenize", {"prompt": PROMPT, "add_special": False})
    check(j2["tokens"] == ids[1:], (ids, j2))
    st, dt = d.json("POST", "/detokenize", {"tokens": ids})
    check(st == 200 and dt["text"] == PROMPT, dt)
    a = cmpl(d, max_tokens=10, temperature=0)["choices"][0]["text"]
    b = cmpl(d, prompt=ids, max_tokens=10, temperature=0)["choices"][0]["text"]
    c = cmpl(d, prompt=[ids, ids], max_tokens=10, temperature=0)
    check(a == b == c["choices"][0]["text"] == c["choices"][1]["text"], (a, b, c))
    st, j = d.json("POST", "/detokenize", {"tokens": [1, 512]})
    check(st == 400 and j["error"]["param"] == "tokens", j)


def test_echo_logprobs(exe):
    d = dmn(exe)
    j = cmpl(d, max_tokens=5, temperature=0, echo=True)
    plain = cmpl(d, max_tokens=5, temperature=0)
    check(j["choices"][0]["text"] == PROMPT + plain["choices"][0]["text"], j)
    j = cmpl(d, max_tokens=6, temperature=0, logprobs=3)
    lp = j["choices"][0]["logprobs"]
    check(len(lp["tokens"]) == 6 and len(lp["token_logprobs"]) == 6 and len(lp["top_logprobs"]) == 6
          and len(lp["text_offset"]) == 6, lp)
    check("".join(lp["tokens"]) == j["choices"][0]["text"], (lp["tokens"], j["choices"][0]["text"]))
    for i in range(6):
        top = lp["top_logprobs"][i]
        check(len(top) <= 3 and lp["token_logprobs"][i] <= 0, top)
        # greedy: the chosen token is the top-1, with the same logprob
        best = max(top.values())
        check(abs(best - lp["token_logprobs"][i]) < 1e-4, (top, lp["token_logprobs"][i]))
    check(lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0, lp["text_offset"])
    # echo + logprobs: the prompt tokens first (the first has no logprob)
    j = cmpl(d, max_tokens=3, temperature=0, logprobs=1, echo=True)
    lp = j["choices"][0]["logprobs"]
    check(len(lp["tokens"]) == 5 + 3, lp["tokens"])
    check(lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp)
    check(all(isinstance(x, float) for x in lp["token_logprobs"][1:]), lp["token_logprobs"])
    # streamed logprobs carry the same numbers
    ev = cmpl(d, max_tokens=6, temperature=0, logprobs=3, stream=True)
    toks, lps = [], []
    for e in ev[:-1]:
        for ch in json.loads(e)["choices"]:
            if ch["logprobs"]:
                toks += ch["logprobs"]["tokens"]
                lps += ch["logprobs"]["token_logprobs"]
    j = cmpl(d, max_tokens=6, temperature=0, logprobs=3)
    check(toks == j["choices"][0]["logprobs"]["tokens"], (toks, j["choices"][0]["logprobs"]["tokens"]))
    check(all(abs(a - b) < 1e-5 for a, b in zip(lps, j["choices"][0]["logprobs"]["token_logprobs"])), lps)


def test_stop(exe):
    d = dmn(exe)
    full = cmpl(d, max_tokens=40, temperature=0)["choices"][0]["text"]
    # a stop string across a word (token) boundary: "ly. S" of "Lily. She": the
    # token before ends with a prefix of it, which must be held back
    idx = full.index(" ", 12)
    stop = full[idx - 2:idx + 2]
    check(len(stop) == 4, stop)
    cut = full[:full.index(stop)]
    j = cmpl(d, max_tokens=40, temperature=0, stop=[stop, "zzzz"])
    check(j["choices"][0]["text"] == cut and j["choices"][0]["finish_reason"] == "stop",
          (j["choices"][0], cut, stop))
    check(j["usage"]["completion_tokens"] < 40, j["usage"])
    ev = cmpl(d, max_tokens=40, temperature=0, stop=stop, stream=True)
    texts, fins, chunks = stream_text(ev)
    check(texts[0] == cut and fins[0] == "stop", (texts, cut))
    for c in chunks:  # no chunk ever carried a piece of the stop string past the cut
        check(stop not in c["choices"][0]["text"], c)
    # a stop string that never matches changes nothing
    j = cmpl(d, max_tokens=40, temperature=0, stop="\u00e9\u00e9\u00e9")
    check(j["choices"][0]["text"] == full and j["choices"][0]["finish_reason"] == "length", j)


def test_logit_bias_and_stop_ids(exe):
    d = dmn(exe)
    st, j = d.json("POST", "/tokenize", {"prompt": " dragon", "add_special": False})
    tid = j["tokens"][0]
    st, piece = d.json("POST", "/detokenize", {"tokens": [tid]})
    j = cmpl(d, max_tokens=5, temperature=0, logit_bias={str(tid): 100})
    check(j["choices"][0]["text"].count(piece["text"].strip()) >= 3, (j, piece))
    # banning the greedy first token changes the output
    g = cmpl(d, max_tokens=1, temperature=0, logprobs=1)
    first = g["choices"][0]["logprobs"]["tokens"][0]
    st, tk = d.json("POST", "/tokenize", {"prompt": first, "add_special": False})
    j = cmpl(d, max_tokens=1, temperature=0, logit_bias={str(t): -100 for t in tk["tokens"]})
    check(j["choices"][0]["text"] != g["choices"][0]["text"], (j, g))
    # stop_token_ids (vLLM extension): stop at the biased token
    j = cmpl(d, max_tokens=10, temperature=0, logit_bias={str(tid): 100}, stop_token_ids=[tid])
    check(j["choices"][0]["finish_reason"] == "stop" and j["usage"]["completion_tokens"] <= 1, j)


def test_other_endpoints(exe):
    d = dmn(exe)
    st, j = d.json("GET", "/v1/models")
    check(st == 200 and j["object"] == "list" and j["data"][0]["id"] == MODEL
          and j["data"][0]["object"] == "model" and j["data"][0]["owned_by"] == "inferd", j)
    # models.retrieve: the list's object; another id a 404 as a completion naming it gets
    st, one = d.json("GET", "/v1/models/" + MODEL)
    check(st == 200 and one == j["data"][0], (one, j))
    for other in ("nope", "Qwen/Qwen2.5-7B-Instruct", MODEL + "x", "a%2Fb"):
        D.expect_error(d.request("GET", "/v1/models/" + other), 404, "model", "model_not_found")
    # the path is normalized first: a trailing slash is the list, ".." leaves /v1/models
    st, again = d.json("GET", "/v1/models/")
    check(st == 200 and again["object"] == "list", again)
    D.expect_error(d.request("GET", "/v1/models/%2e%2e"), 404, None, "not_found")
    st, hd, b = d.request("POST", "/v1/models/" + MODEL, body=b"{}")
    check(st == 405 and hd.get("allow") == "GET, HEAD", (st, hd, b[:200]))
    st, j = d.json("GET", "/health")
    check(st == 200 and j == {"status": "ok"}, j)
    m = d.metrics()
    for k in ("inferd_time_to_first_token_seconds_count", "inferd_inter_token_latency_seconds_count",
              "inferd_e2e_request_latency_seconds_count", "inferd_queue_wait_seconds_count",
              "inferd_kv_blocks_capacity", "inferd_kv_blocks_used", "inferd_running_sequences",
              "inferd_waiting_requests", 'inferd_requests_total{status="200"}',
              "inferd_prompt_tokens_total", "inferd_completion_tokens_total",
              "inferd_prefix_cache_hits_total", 'inferd_time_to_first_token_seconds_bucket{le="+Inf"}'):
        check(k in m, "metric %s missing" % k)
    before = m["inferd_completion_tokens_total"]
    cmpl(d, max_tokens=3, temperature=0)
    m2 = d.metrics()
    check(m2["inferd_completion_tokens_total"] == before + 3, (before, m2["inferd_completion_tokens_total"]))
    check(m2["inferd_kv_blocks_used"] == 0 or m2["inferd_kv_blocks_used"] <= m2["inferd_kv_blocks_capacity"], m2)


def in_threads(n, fn):
    """fn(0) .. fn(n - 1) at once, one thread each; their exceptions fail the test."""
    errs = []

    def run(i):
        try:
            fn(i)
        except Exception as e:  # collected and reported below
            errs.append(e)

    th = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    check(not errs, errs)


def test_concurrent(exe):
    """16 concurrent greedy requests (half streamed) give the solo outputs."""
    d = dmn(exe)
    prompts = ["Once upon a time", "The dog", "Lily was", "One day, a", "Tom and Sam"]
    solo = {p: cmpl(d, prompt=p, max_tokens=24, temperature=0)["choices"][0]["text"] for p in prompts}
    res = {}

    def one(i):
        p = prompts[i % len(prompts)]
        if i % 2:
            texts, _, _ = stream_text(cmpl(d, prompt=p, max_tokens=24, temperature=0, stream=True))
            res[i] = (p, texts[0])
        else:
            res[i] = (p, cmpl(d, prompt=p, max_tokens=24, temperature=0)["choices"][0]["text"])

    in_threads(16, one)
    for i, (p, t) in res.items():
        check(t == solo[p], "request %d (%r) differs under load:\n%r\n%r" % (i, p, t, solo[p]))


def test_llamacpp_numerics(exe):
    """llamacpp_numerics = true: each reference prompt served alone gets
    llama.cpp's greedy continuation, text for text (a random-weight model,
    where the batch-invariant default differs after a few tokens)."""
    ref_path = D.shared("reference", "tiny-llama-Q4_K_M.json")
    if not os.path.exists(ref_path):
        print("  (no reference answers: skipped)")
        return
    ref = json.load(open(ref_path))
    if os.environ.get("INFERD_BACKEND") == "cuda":
        # a CPU-backend mode: a daemon pinned to the GPU refuses it at
        # startup, naming the setting and the way out, and exits non-zero
        try:
            d = D.Daemon(exe, model=D.model_path(ref["model_file"]),
                         args=["--n-ctx", "512", "--llamacpp-numerics", "true"])
        except RuntimeError as e:
            check("llama.cpp numerics are a CPU-backend mode" in str(e),
                  "refusal does not say why: %s" % str(e)[:400])
            return
        d.stop()
        check(False, "a cuda daemon accepted llamacpp_numerics")
        return
    d = D.Daemon(exe, model=D.model_path(ref["model_file"]),
                 args=["--n-ctx", "512", "--llamacpp-numerics", "true"])
    try:
        for i, c in enumerate(ref["cases"]):
            st, _, b = d.post("/v1/completions", {"model": "tiny-llama-Q4_K_M", "prompt": c["prompt"],
                                                  "max_tokens": len(c["completion_tokens"]),
                                                  "temperature": 0})
            check(st == 200, "status %d: %r" % (st, b[:300]))
            t = json.loads(b)["choices"][0]["text"]
            check(t == c["completion_text"], "case %d differs from llama.cpp:\n%r\n%r" % (i, t, c["completion_text"]))
    finally:
        rc = d.stop()
        check(rc == 0, "daemon exit status %d" % rc)


JSON_SCHEMA = {"type": "object",
               "properties": {"name": {"type": "string", "maxLength": 12},
                              "age": {"type": "integer"},
                              "happy": {"type": "boolean"},
                              "tags": {"type": "array", "items": {"enum": ["red", "blue"]},
                                       "maxItems": 3},
                              "note": {"type": ["string", "null"]}},
               "required": ["name", "age", "happy", "tags"]}


def conforms(o):
    """JSON_SCHEMA, with the server's rule that keys come in the listed order."""
    order = list(JSON_SCHEMA["properties"])
    if not isinstance(o, dict) or list(o) != [k for k in order if k in o]:
        return False
    if any(k not in o for k in JSON_SCHEMA["required"]):
        return False
    return (isinstance(o["name"], str) and len(o["name"]) <= 12 and
            isinstance(o["age"], int) and not isinstance(o["age"], bool) and
            isinstance(o["happy"], bool) and isinstance(o["tags"], list) and
            len(o["tags"]) <= 3 and all(t in ("red", "blue") for t in o["tags"]) and
            (o.get("note") is None or isinstance(o["note"], str)))


def closed_values(d, rf, seeds, max_tokens):
    """The values of the choices that closed ("stop"), sampled at
    temperature 1 with n = 2 for each seed."""
    out = []
    for seed in seeds:
        j = cmpl(d, max_tokens=max_tokens, temperature=1.0, seed=seed, n=2, response_format=rf)
        out += [json.loads(c["text"]) for c in j["choices"] if c["finish_reason"] == "stop"]
    return out


def test_response_format(exe):
    """JSON mode and json_schema on /v1/completions (llama.cpp's server takes
    response_format there too): sampled at temperature 1, every choice that
    ends with "stop" is one JSON value that conforms and nothing after it."""
    d = dmn(exe)
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": JSON_SCHEMA}}
    stops = 0
    for seed in range(1, 5):
        j = cmpl(d, max_tokens=300, temperature=1.0, seed=seed, n=2, response_format=rf)
        for c in j["choices"]:
            check(c["finish_reason"] in ("stop", "length"), c)
            if c["finish_reason"] == "stop":
                stops += 1
                o = json.loads(c["text"])
                check(conforms(o) and c["text"].endswith("}"), (c["text"], o))
    check(stops >= 4, "only %d of 8 choices closed their JSON in 300 tokens" % stops)
    # streaming gives the same text; greedy JSON mode gives an object
    j = cmpl(d, max_tokens=300, temperature=1.0, seed=7, response_format=rf)
    texts, fins, _ = stream_text(cmpl(d, max_tokens=300, temperature=1.0, seed=7,
                                      response_format=rf, stream=True))
    check(texts[0] == j["choices"][0]["text"] and fins[0] == j["choices"][0]["finish_reason"],
          (texts, j))
    j = cmpl(d, max_tokens=300, temperature=0, response_format={"type": "json_object"})
    c = j["choices"][0]
    if c["finish_reason"] == "stop":
        check(isinstance(json.loads(c["text"]), dict), c)
    else:  # unclosed after 300 tokens: at least it started an object
        check(c["text"].lstrip().startswith("{"), c)
    # integer ranges and a tagged union (2026-12-05): every closed value is
    # inside its range / the object its tag names
    shape = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "dot"},
                                          "x": {"type": "integer", "minimum": -3, "maximum": 40}},
         "required": ["kind", "x"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"enum": ["box", "bag"]},
                                          "n": {"type": "integer", "exclusiveMinimum": 100}},
         "required": ["kind", "n"]}]}}}
    closed = closed_values(d, shape, range(1, 7), 120)
    for o in closed:
        if o["kind"] == "dot":
            check(list(o) == ["kind", "x"] and -3 <= o["x"] <= 40, o)
        else:
            check(o["kind"] in ("box", "bag") and list(o) == ["kind", "n"] and o["n"] > 100, o)
    check(len(closed) >= 3, "only %d of 12 tagged-union choices closed in 120 tokens" % len(closed))
    # formats and a pattern (2026-12-05): every closed value parses as what
    # its format names, and the code matches its pattern
    pat = {"type": "json_schema", "json_schema": {"name": "f", "schema": {
        "type": "object", "properties": {
            "when": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
            "code": {"type": "string", "pattern": "^[A-Z]{2,3}-[0-9]{1,4}$"}},
        "required": ["when", "id", "ip", "code"], "additionalProperties": False}}}
    closed = closed_values(d, pat, range(1, 5), 200)
    for o in closed:
        check(list(o) == ["when", "id", "ip", "code"], o)
        # RFC 3339 allows a leap second, which Python's datetime does not
        datetime.datetime.fromisoformat(re.sub(r":60(?=[.Z+-])", ":59", o["when"]))
        check(str(uuid.UUID(o["id"])) == o["id"].lower(), o)
        check(str(ipaddress.IPv4Address(o["ip"])) == o["ip"], o)
        check(re.fullmatch(r"[A-Z]{2,3}-[0-9]{1,4}", o["code"]) is not None, o)
    check(len(closed) >= 2, "only %d of 8 format choices closed in 200 tokens" % len(closed))
    # a schema no finite JSON satisfies (every object requires another): the
    # choice ends with "length" at the nesting limit, before max_tokens
    rec = {"type": "json_schema", "json_schema": {"schema": {
        "type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}}}
    j = cmpl(d, max_tokens=400, temperature=0, response_format=rec)
    c = j["choices"][0]
    check(c["finish_reason"] == "length" and j["usage"]["completion_tokens"] < 400, j)
    check(c["text"].count("{") == 32 and "}" not in c["text"], c["text"])
    # 12 concurrent requests, constrained and not, seeded: each equals its solo run
    solo = {}
    for i in range(12):
        kw = dict(max_tokens=120, temperature=1.0, seed=100 + i)
        if i % 3:
            kw["response_format"] = rf if i % 3 == 1 else {"type": "json_object"}
        solo[i] = (kw, cmpl(d, **kw)["choices"][0]["text"])
    res = {}

    def one(i):
        res[i] = cmpl(d, **solo[i][0])["choices"][0]["text"]

    in_threads(12, one)
    for i in range(12):
        check(res.get(i) == solo[i][1], "request %d differs under load:\n%r\n%r" % (i, res.get(i), solo[i][1]))
    # a body big enough for the parse worker pool (its own jansson allocator:
    # the schema compiler once freed jansson's memory with free())
    pad = "x" * 40000
    big = {"type": "json_schema", "json_schema": {"name": "p", "description": pad,
                                                  "schema": JSON_SCHEMA}}
    for _ in range(3):
        j = cmpl(d, max_tokens=300, temperature=1.0, seed=3, response_format=big)
        if j["choices"][0]["finish_reason"] == "stop":
            check(conforms(json.loads(j["choices"][0]["text"])), j)
    # /metrics counts them, and the time their allowed sets took
    m = d.metrics()
    check(m["inferd_engine_json_tokens_total"] > 100 and
          0 < m["inferd_engine_json_allow_seconds_total"] < 60, m)
    # what the constraint cannot enforce is refused, by name
    for bad, word in (({"type": "json_schema", "json_schema": {"schema": {
                          "type": "string", "pattern": "(?=a)"}}}, "lookaround"),
                      ({"type": "json_schema", "json_schema": {"schema": {
                          "type": "string", "format": "uri-reference"}}}, "'uri-reference'"),
                      ({"type": "yaml"}, "'yaml'"),
                      ({"type": "json_schema", "json_schema": {"schema": {"anyOf": [
                          {"type": "integer"}, {"type": "number"}]}}}, "start differently")):
        e = expect_error(d.post("/v1/completions", {"model": MODEL, "prompt": PROMPT,
                                                     "response_format": bad}), 400,
                         "response_format")
        check(word in e["message"], e)


def main():
    tests = [test_shape_non_stream, test_matches_generate, test_stream, test_stream_incremental,
             test_n_and_prompts, test_token_prompts, test_echo_logprobs, test_stop,
             test_logit_bias_and_stop_ids, test_other_endpoints, test_concurrent,
             test_llamacpp_numerics, test_response_format]
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
