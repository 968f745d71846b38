"""render.py: the reference side of make tokenizer-parity for chat renders.

Reads JSON lines on stdin and writes one JSON line per request on stdout:
{"text": ...} or {"error": ...}. A request {"normalize": "NFC", "text": ...}
normalizes with unicodedata (the tokenizers' NFC/NFKC normalizers). It renders with Python's jinja2 (Debian's
python3-jinja2) set up as transformers' render_jinja_template sets it up,
after vLLM's chat message parsing (parse_chat_messages with the "string"
content format and _postprocess_messages), both ported here line by line.
Run with /usr/bin/python3 (not a virtualenv) so the Debian package is used.
"""
import json
import sys
import unicodedata
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    # transformers' {% generation %} block: renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def content_text(content):
    # _parse_chat_message_content + _parse_chat_message_content_parts,
    # content format "string".
    if content is None:
        content = []
    elif isinstance(content, str):
        content = [{"type": "text", "text": content}]
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        ptype = part.get("type")
        if ptype in ("text", "input_text", "output_text"):
            text = part.get("text")
        elif ptype == "refusal":
            text = part.get("refusal")
        else:
            raise ValueError("unsupported part %r" % ptype)
        if text is None:
            continue
        texts.append(text)
    return "\n".join(texts)


def conversation(messages):
    out = []
    for message in messages:
        role = message["role"]
        msg = {"role": role, "content": content_text(message.get("content"))}
        if role == "assistant":
            tool_calls = message.get("tool_calls")
            if tool_calls is not None:
                # pydantic validation of ChatCompletionMessageToolCallParam
                # keeps the TypedDict's key order.
                msg["tool_calls"] = [
                    {"id": tc["id"], "function": {"arguments": tc["function"]["arguments"], "name": tc["function"]["name"]}, "type": tc["type"]}
                    for tc in tool_calls
                ]
            reasoning = message.get("reasoning")
            if reasoning is not None:
                msg["reasoning"] = reasoning
                msg["reasoning_content"] = reasoning
        elif role == "tool":
            if "tool_call_id" in message:
                msg["tool_call_id"] = message["tool_call_id"]
        if "name" in message and isinstance(message["name"], str):
            msg["name"] = message["name"]
        if "task" in message and isinstance(message["task"], str):
            msg["task"] = message["task"]
        out.append(msg)
    # _postprocess_messages
    for message in out:
        if message["role"] == "assistant" and "tool_calls" in message:
            tool_calls = message.get("tool_calls")
            if not isinstance(tool_calls, list):
                continue
            if len(tool_calls) == 0:
                message.pop("tool_calls", None)
                continue
            for item in tool_calls:
                content = item["function"].get("arguments")
                if isinstance(content, str):
                    try:
                        item["function"]["arguments"] = json.loads(content)
                    except json.JSONDecodeError:
                        item["function"]["arguments"] = {}
                elif not isinstance(content, (dict, list)):
                    item["function"]["arguments"] = {}
    return out


def tool_dicts(tools):
    # [tool.model_dump() for tool in request.tools]
    out = []
    for tool in tools:
        fn = tool["function"]
        f = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
        for k, v in fn.items():
            if k not in f:
                f[k] = v
        d = {"type": tool.get("type", "function"), "function": f}
        for k, v in tool.items():
            if k not in d:
                d[k] = v
        out.append(d)
    return out


def render(req):
    now = datetime.fromisoformat(req["now"])
    env = make_env(now)
    template = env.from_string(req["template"])
    agp = req.get("add_generation_prompt", True)
    cfm = req.get("continue_final_message", False)
    chat = conversation(req["messages"])
    tools = None if req.get("tools") is None else tool_dicts(req["tools"])
    kwargs = dict(req.get("special") or {})
    kwargs.update(req.get("kwargs") or {})
    rendered = template.render(messages=chat, tools=tools, documents=None, add_generation_prompt=agp, **kwargs)
    if cfm:
        final_message = chat[-1]["content"]
        if final_message.strip() not in rendered:
            raise ValueError("continue_final_message: final message not in the render")
        loc = rendered.rindex(final_message.strip())
        if rendered[loc: loc + len(final_message.lstrip())] == final_message:
            rendered = rendered[: loc + len(final_message.lstrip())]
        else:
            rendered = rendered[: loc + len(final_message.strip())]
    return rendered


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            if "normalize" in req:
                out = {"text": unicodedata.normalize(req["normalize"], req["text"])}
            elif "probe" in req:
                env = make_env(datetime.fromisoformat("2026-12-01T10:00:00"))
                out = {"text": env.from_string(req["probe"]).render(**(req.get("vars") or {}))}
            else:
                out = {"text": render(req)}
        except Exception as e:  # the Go side must fail too
            out = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
