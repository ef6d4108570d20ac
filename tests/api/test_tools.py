#!/usr/bin/env python3
"""test_tools -- tool calling (tools, tool_choice, parallel_tool_calls) against the real daemon.

tiny-qwen2 served with --chat-template chatml (its own template is Qwen2's,
without <tool_call>: naming the family is the operator's word that the model
knows Qwen's format), tiny-llama with --chat-template llama3.1 (the JSON call
format). Checks: the signatures in the prompt are exactly what the
templates' tojson writes (Python's json.dumps is that filter: one line, or
indent=4 for Llama 3.1); an assistant's calls and tool results rendered; a
forced call (tool_choice required / named) at temperature 1 on random
weights comes back as message.tool_calls whose arguments parse and follow
the function's schema, finish_reason "tool_calls", content null; the stream
carries the same call; auto leaves a model that writes no call with content;
the 400s (strict schema outside the subset, unknown named tool, tools with
response_format, two calls in one Llama 3.1 turn).
usage: test_tools.py <inferd binary>
"""
import json
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check, expect_error

QWEN = "tiny-qwen2-Q4_K_M"
LLAMA = "tiny-llama-Q4_K_M"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city — now",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 12},
        "unit": {"enum": ["c", "f"]},
        "days": {"type": "integer"}},
        "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {"name": "get-time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}},
    "required": ["tz"], "additionalProperties": False}}}
MSGS = [{"role": "user", "content": "Weather in Paris?"}]

_d = {}


def dmn(exe, which):
    if which not in _d:
        if which == "qwen":
            _d[which] = D.Daemon(exe, model=D.model_path(QWEN + ".gguf"),
                                 args=["--n-ctx", "1024", "--chat-template", "chatml"])
        else:
            _d[which] = D.Daemon(exe, model=D.model_path(LLAMA + ".gguf"),
                                 args=["--n-ctx", "1024", "--chat-template", "llama3.1"])
    return _d[which]


def chat(d, model, **kw):
    req = {"model": model, "messages": MSGS}
    req.update(kw)
    st, hd, b = d.post("/v1/chat/completions", req)
    check(st == 200, "status %d: %r" % (st, b[:400]))
    if kw.get("stream"):
        return D.sse_events(b)
    return json.loads(b)


def conforms_weather(args):
    check(isinstance(args, dict) and list(args)[:2] == ["city", "unit"], args)
    check(set(args) <= {"city", "unit", "days"}, args)
    check(isinstance(args["city"], str) and 1 <= len(args["city"]) <= 12, args)
    check(args["unit"] in ("c", "f"), args)
    check(isinstance(args.get("days", 0), int), args)


def test_prompt(exe):
    d = dmn(exe, "qwen")
    st, j = d.json("POST", "/apply-template", {"messages": MSGS, "tools": [WEATHER, TIME]})
    check(st == 200, j)
    p = j["prompt"]
    # the signatures as Jinja's tojson (json.dumps, ensure_ascii off) writes them
    sig = "\n".join(json.dumps(t, ensure_ascii=False) for t in (WEATHER, TIME))
    check("<tools>\n" + sig + "\n</tools>" in p, p[:1500])
    check(p.startswith("<|im_start|>system\nYou are a helpful assistant\n\n# Tools\n\n"), p[:200])
    check(p.endswith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"), p)
    # forced: the assistant turn opens the call; "none": no tools in the prompt
    st, j = d.json("POST", "/apply-template", {"messages": MSGS, "tools": [WEATHER],
                                               "tool_choice": "required"})
    check(st == 200 and j["prompt"].endswith("<|im_start|>assistant\n<tool_call>\n"), j)
    st, j = d.json("POST", "/apply-template", {"messages": MSGS, "tools": [WEATHER],
                                               "tool_choice": "none"})
    check(st == 200 and "<tools>" not in j["prompt"], j)
    # a conversation with a call and its results: arguments parsed and
    # written back as the template's tojson
    hist = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22"},
        {"role": "tool", "tool_call_id": "call_2", "content": "sun"}]
    st, j = d.json("POST", "/apply-template", {"messages": hist, "tools": [WEATHER]})
    check(st == 200, j)
    check("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
          "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n" in j["prompt"], j)
    check("<|im_start|>user\n<tool_response>\n22\n</tool_response>\n<tool_response>\nsun\n"
          "</tool_response><|im_end|>\n<|im_start|>assistant\n" in j["prompt"], j)
    # Llama 3.1: indented signatures in the first user turn
    d2 = dmn(exe, "llama")
    st, j = d2.json("POST", "/apply-template", {"messages": MSGS, "tools": [WEATHER]})
    check(st == 200, j)
    check("Environment: ipython\n" in j["prompt"], j)
    check(json.dumps(WEATHER, ensure_ascii=False, indent=4) + "\n\nWeather in Paris?<|eot_id|>"
          in j["prompt"], j["prompt"])


def check_forced(r, names, key_check):
    calls = 0
    for c in r["choices"]:
        m = c["message"]
        check(c["finish_reason"] in ("tool_calls", "length"), c)
        if c["finish_reason"] == "length":
            check("tool_calls" not in m, c)
            continue
        calls += 1
        check(m["content"] is None and len(m["tool_calls"]) == 1, m)
        tc = m["tool_calls"][0]
        check(tc["type"] == "function" and tc["id"].startswith("call_") and len(tc["id"]) == 29, tc)
        check(tc["function"]["name"] in names, tc)
        key_check(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
    return calls


def test_forced(exe):
    d = dmn(exe, "qwen")
    calls, ids = 0, set()

    def weather_only(name, args):
        check(name == "get_weather", name)
        conforms_weather(args)

    for seed in (1, 2, 3):
        r = chat(d, QWEN, tools=[WEATHER], tool_choice="required", temperature=1.0, seed=seed,
                 n=2, max_tokens=120)
        calls += check_forced(r, {"get_weather"}, weather_only)
        ids.update(c["message"]["tool_calls"][0]["id"] for c in r["choices"]
                   if c["finish_reason"] == "tool_calls")
    check(calls >= 3, "only %d of 6 forced calls closed in 120 tokens" % calls)
    # /metrics counts the calls answered
    m0 = d.metrics()["inferd_tool_calls_total"]
    r = chat(d, QWEN, tools=[WEATHER], tool_choice="required", temperature=1.0, seed=1, n=2,
             max_tokens=120)
    k = sum(len(c["message"].get("tool_calls") or []) for c in r["choices"])
    check(d.metrics()["inferd_tool_calls_total"] == m0 + k, (m0, k))
    check(len(ids) == calls, ids)
    # named among two: that one, its own schema (no other keys)
    def time_only(name, args):
        check(name == "get-time" and list(args) == ["tz"] and len(args["tz"]) <= 8, (name, args))
    r = chat(d, QWEN, tools=[WEATHER, TIME], temperature=1.0, seed=4, n=2, max_tokens=80,
             tool_choice={"type": "function", "function": {"name": "get-time"}})
    check(check_forced(r, {"get-time"}, time_only) >= 1, r)
    # required among two: either, each with its own schema (the name
    # written picks the arguments' constraint)
    def either(name, args):
        if name == "get-time":
            time_only(name, args)
        else:
            weather_only(name, args)
    got = set()
    for seed in (5, 6, 7, 8):
        r = chat(d, QWEN, tools=[WEATHER, TIME], tool_choice="required", temperature=1.0,
                 seed=seed, n=2, max_tokens=120)
        check_forced(r, {"get_weather", "get-time"}, either)
        got.update(c["message"]["tool_calls"][0]["function"]["name"] for c in r["choices"]
                   if c["finish_reason"] == "tool_calls")
    print("required among two: calls of", sorted(got))


def test_stream(exe):
    """The stream carries what the body does: role first, one tool_calls delta
    (index 0, id, name, whole arguments), finish_reason tool_calls."""
    d = dmn(exe, "qwen")
    kw = dict(tools=[WEATHER], tool_choice="required", temperature=1.0, seed=7, max_tokens=120)
    r = chat(d, QWEN, **kw)
    ev = [json.loads(e) for e in chat(d, QWEN, stream=True, **kw)[:-1]]
    deltas = [e["choices"][0]["delta"] for e in ev if e["choices"]]
    finish = [e["choices"][0]["finish_reason"] for e in ev if e["choices"]]
    check(deltas[0].get("role") == "assistant", deltas[0])
    got = [t for dl in deltas for t in dl.get("tool_calls") or []]
    body = r["choices"][0]["message"].get("tool_calls") or []
    check(len(got) == len(body), (got, body))
    for a, b in zip(got, body):
        check(a["index"] == 0 and a["id"].startswith("call_"), a)
        check(a["function"] == b["function"], (a, b))
    check(finish[-1] == r["choices"][0]["finish_reason"], (finish, r))
    text = "".join(dl.get("content") or "" for dl in deltas)
    check(text == (r["choices"][0]["message"]["content"] or ""), (text, r))


def test_auto(exe):
    """auto with a model that writes no call: content as without tools."""
    d = dmn(exe, "qwen")
    r = chat(d, QWEN, tools=[WEATHER], temperature=0, max_tokens=16)
    c = r["choices"][0]
    check(c["finish_reason"] in ("stop", "length") and "tool_calls" not in c["message"], c)
    check(isinstance(c["message"]["content"], str), c)
    r2 = chat(d, QWEN, tools=[WEATHER], temperature=0, max_tokens=16, stream=True)
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in r2[:-1] if json.loads(e)["choices"])
    check(text == c["message"]["content"], (text, c))


def test_llama31(exe):
    d = dmn(exe, "llama")
    calls = 0
    for seed in (1, 2):
        r = chat(d, LLAMA, tools=[WEATHER], tool_choice="required", temperature=1.0, seed=seed,
                 n=2, max_tokens=120)
        calls += check_forced(r, {"get_weather"}, lambda n, a: conforms_weather(a))
    check(calls >= 2, "only %d of 4 forced calls closed" % calls)


def test_errors(exe):
    d = dmn(exe, "qwen")

    def err(body, param, d=d, model=QWEN):
        b = {"model": model, "messages": MSGS}
        b.update(body)
        return expect_error(d.post("/v1/chat/completions", b), 400, param)

    strict = json.loads(json.dumps(WEATHER))
    strict["function"]["strict"] = True
    # a pattern the constraint cannot enforce (lookahead)
    strict["function"]["parameters"]["properties"]["city"]["pattern"] = "^(?=[A-Z])"
    e = err({"tools": [strict], "tool_choice": "required"}, "tools")
    check("pattern" in e["message"], e)
    # not strict: the pattern is not enforced, the rest is
    loose = json.loads(json.dumps(strict))
    del loose["function"]["strict"]
    r = chat(d, QWEN, tools=[loose], tool_choice="required", temperature=1.0, seed=1,
             max_tokens=120)
    check_forced(r, {"get_weather"}, lambda n, a: conforms_weather(a))
    err({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
        "tool_choice")
    err({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format")
    err({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools[0]")
    err({"tools": [WEATHER, WEATHER]}, "tools")
    err({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls")
    err({"messages": MSGS + [{"role": "assistant", "content": None,
                              "tool_calls": [{"function": {"name": 3}}]}]},
        "messages[1].tool_calls")
    err({"messages": MSGS + [{"role": "user", "content": None}]}, "messages[1].content")
    two = {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}] * 2}
    e = err({"messages": MSGS + [two], "tools": [WEATHER]}, "messages", d=dmn(exe, "llama"),
            model=LLAMA)
    check("one tool call" in e["message"], e)
    # the daemon is fine after all that
    chat(d, QWEN, max_tokens=2)


def main():
    tests = [test_prompt, test_forced, test_stream, test_auto, test_llama31, test_errors]
    try:
        D.run(tests, sys.argv)
    finally:
        bad = False
        for d in _d.values():
            log = d.log()
            rc = d.stop()
            if rc != 0:
                print("daemon exit status %d\n%s" % (rc, log[-3000:]))
                bad = True
        if bad:
            sys.exit(1)


if __name__ == "__main__":
    main()
