#!/usr/bin/env python3
"""Golden chat-template renderings for redlite-chat's template tests.

Renders the Qwen3-Coder chat template with Jinja2 configured exactly like
transformers' `_compile_jinja_template` (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, the `loopcontrols` extension and transformers'
`{% generation %}` block extension, transformers' `tojson`,
`raise_exception`, `strftime_now`) and the render call of
`apply_chat_template` (`tools=None` when no tools are given, special tokens
as keyword arguments).

Messages are first normalised the way OpenAI-compatible servers do before a
template sees them: `developer` -> `system`, text parts joined with "\n",
tool-call `arguments` JSON strings parsed into objects.

Usage:
  make_template_golden.py TEMPLATE.jinja OUT.json     write the golden file
  make_template_golden.py --render                    read {"template", "cases"}
                                                      JSON on stdin, print the
                                                      renderings as JSON
"""
import copy
import json
import sys
from datetime import datetime

import jinja2
import jinja2.nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(Extension):
    """transformers' `{% generation %}...{% endgeneration %}` tag: parsed as a
    call block whose output is its body, unchanged (transformers only records
    where the body lands in the output)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _render_body(self, context, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def normalise(messages):
    out = []
    for m in copy.deepcopy(messages):
        if m.get("role") == "developer":
            m["role"] = "system"
        c = m.get("content")
        if isinstance(c, list):
            m["content"] = "\n".join(p if isinstance(p, str) else p["text"] for p in c)
        elif c is None:
            m["content"] = None if m.get("tool_calls") else ""
        for tc in m.get("tool_calls") or []:
            f = tc.get("function", tc)
            if isinstance(f.get("arguments"), str):
                f["arguments"] = json.loads(f["arguments"]) if f["arguments"].strip() else {}
        if "reasoning" in m and "reasoning_content" not in m:
            m["reasoning_content"] = m["reasoning"]
        out.append(m)
    return out


def render(template, case, bos="<|endoftext|>", eos="<|im_end|>"):
    kwargs = {"bos_token": bos, "eos_token": eos}
    kwargs.update(case.get("extra") or {})
    # JSON given as text is read here by json.loads, independently of the
    # caller's parser.
    tools = case.get("tools")
    if "tools_json" in case:
        tools = json.loads(case["tools_json"])
    messages = case.get("messages")
    if "messages_json" in case:
        messages = json.loads(case["messages_json"])
    try:
        text = template.render(messages=normalise(messages), tools=tools,
                               documents=None,
                               add_generation_prompt=case.get("add_generation_prompt", False),
                               **kwargs)
        return {"ok": text}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}
    except Exception as e:  # TypeError, ValueError, ... raised while rendering
        return {"error": f"{type(e).__name__}: {e}", "exception": True}


READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "  Read a file from disk.\nReturns its text.  ",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace"},
                "offset": {"type": "integer", "description": "First line (1-based)", "minimum": 1,
                           "default": 1},
                "limit": {"type": ["integer", "null"], "description": "Max lines"},
            },
            "required": ["path"],
        },
        "strict": False,
    },
}

EDIT_TOOL = {
    "type": "function",
    "function": {
        "name": "edit",
        "description": "Apply edits to a file.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File to edit"},
                "edits": {
                    "type": "array",
                    "description": "Replacements, applied in order",
                    "items": {
                        "type": "object",
                        "properties": {
                            "old": {"type": "string"},
                            "new": {"type": "string"},
                            "count": {"type": "integer", "minimum": 0},
                        },
                        "required": ["old", "new"],
                    },
                },
                "mode": {"type": "string", "enum": ["strict", "fuzzy", "régex"],
                         "description": "Matching mode"},
                "dry_run": {"type": "boolean", "default": False},
                "scale": {"type": "number", "exclusiveMaximum": 2.5},
                "options": {
                    "type": "object",
                    "properties": {"backup": {"type": "boolean"}, "tags": {"type": "array",
                                   "items": {"type": "string"}}},
                },
            },
            "required": ["path", "edits"],
            "additionalProperties": False,
        },
    },
}

# A tool given without the "function" wrapper, no description, no properties.
PING_TOOL = {"name": "ping", "parameters": {"type": "object", "properties": {}}}

TOOLS = [READ_TOOL, EDIT_TOOL, PING_TOOL]

TWO_CALLS = {
    "role": "assistant",
    "content": "  I will read the file and then edit it.\n",
    "tool_calls": [
        {"id": "call_a", "type": "function", "function": {
            "name": "read",
            "arguments": json.dumps({"path": "src/main.rs", "offset": 10, "limit": None}),
        }},
        {"id": "call_b", "type": "function", "function": {
            "name": "edit",
            "arguments": {
                "path": "src/<lib>&.rs",
                "edits": [{"old": "fn a() {\n    1 < 2 && 3 > 2\n}", "new": "fn a() -> bool {\n\ttrue\n}",
                           "count": 1},
                          {"old": "\"quoted\" \\ back", "new": "ünïcödé ✓ 🚀"}],
                "mode": "fuzzy",
                "dry_run": True,
                "scale": 0.5,
                "options": {"backup": False, "tags": ["a", "b c"], "ratio": 1e-07, "big": 1e16,
                            "neg": -2.0},
                "note": "line one\nline <two> & three\n",
            },
        }},
    ],
}

CASES = [
    {
        "name": "full_two_calls_two_results",
        "messages": [
            {"role": "system", "content": "You are a careful coding assistant."},
            {"role": "user", "content": "Fix the comparison in src/main.rs, please."},
            TWO_CALLS,
            {"role": "tool", "tool_call_id": "call_a", "content": "fn a() {\n    1 < 2 && 3 > 2\n}\n"},
            {"role": "tool", "tool_call_id": "call_b", "name": "edit", "content": "ok: 1 edit"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "no_system_with_tools",
        "messages": [{"role": "user", "content": "What files are there?"}],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "no_tools",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Say <b>bold</b> & stop."},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "no_tools_no_generation_prompt",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
        ],
        "add_generation_prompt": False,
    },
    {
        "name": "empty_tools_list",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [],
        "add_generation_prompt": True,
    },
    {
        "name": "tool_only_turn",
        "messages": [
            {"role": "user", "content": "Ping the server."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "pong"},
            {"role": "assistant", "content": "The server answered."},
            {"role": "user", "content": "Again, and read README.md."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_2", "type": "function", "function": {"name": "ping", "arguments": ""}},
                {"id": "call_3", "type": "function", "function": {
                    "name": "read", "arguments": "{\"path\": \"README.md\", \"offset\": 1}"}}]},
            {"role": "tool", "tool_call_id": "call_2", "content": "pong"},
            {"role": "tool", "tool_call_id": "call_3", "content": "# Title\n\nText & more <html>"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "content_as_parts",
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "You are terse."},
                                              {"type": "text", "text": "Answer in English."}]},
            {"role": "user", "content": [{"type": "text", "text": "Part one."},
                                         {"type": "text", "text": "Part two."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [READ_TOOL],
        "add_generation_prompt": True,
    },
    {
        "name": "extra_kwargs_and_system_later",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": "Mid-conversation system note."},
            {"role": "assistant", "content": "Noted."},
        ],
        "extra": {"enable_thinking": False, "custom": "x"},
        "add_generation_prompt": False,
    },
]


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--render":
        req = json.load(sys.stdin)
        template = compile_template(req["template"])
        out = [render(template, c, req.get("bos", "<|endoftext|>"), req.get("eos", "<|im_end|>"))
               for c in req["cases"]]
        json.dump(out, sys.stdout, ensure_ascii=False)
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        template = compile_template(f.read())
    golden = []
    for case in CASES:
        r = render(template, case)
        if "ok" not in r:
            sys.exit(f"case {case['name']}: {r['error']}")
        golden.append({**case, "add_generation_prompt": case.get("add_generation_prompt", False),
                       "expected": r["ok"]})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"template": "Qwen3-Coder.jinja", "bos_token": "<|endoftext|>",
                   "eos_token": "<|im_end|>", "cases": golden}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
