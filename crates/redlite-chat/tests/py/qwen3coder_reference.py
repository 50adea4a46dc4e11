#!/usr/bin/env python3
"""Reference tool-call extraction for redlite-chat's tool-call tests.

A standalone model of the official Qwen3-Coder tool parser's non-streaming
path: `Qwen3CoderToolParser.extract_tool_calls` of vLLM
(`vllm/tool_parsers/qwen3coder_tool_parser.py`, formerly
`vllm/entrypoints/openai/tool_parsers/qwen3coder_tool_parser.py`; vLLM is
licensed under the Apache License 2.0, copyright the vLLM contributors).
It reproduces that parser's behaviour without vLLM: the same tag patterns
(`<tool_call>` blocks, `<function=` blocks, `<parameter=` values ending at
`</parameter>`, the next `<parameter=`, `</function>` or the end), the same
newline stripping, and the same value conversion by schema type, including
its fallbacks (`ast.literal_eval`) and its failure mode (any exception: the
whole output is content, no calls). Only the standard library is used.

Usage: JSON on stdin, {"cases": [{"text": ..., "tools": [...]}, ...]};
prints a JSON list, one {"content": str | null, "calls": [{"name": ...,
"arguments": "<json text>"}]} per case.
"""
import ast
import json
import re
import sys

BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
PARAMETER = re.compile(
    r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL
)

STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")
FLOAT_PREFIXES = ("num", "float")
BOOL_TYPES = ("boolean", "bool", "binary")


def properties_of(name, tools):
    """The `properties` of the named tool's parameters ({} when unknown)."""
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(fn, dict) or "name" not in fn:
            continue
        if fn["name"] != name:
            continue
        params = fn.get("parameters")
        if isinstance(params, dict):
            return params["properties"] if "properties" in params else params
        return {}
    return {}


def convert(value, pname, props):
    """One parameter value, converted by its schema type."""
    if value.lower() == "null":
        return None
    if pname not in props:
        return value
    schema = props[pname]
    kind = str(schema["type"]).strip().lower() if isinstance(schema, dict) and "type" in schema else "string"
    if kind in STRING_TYPES:
        return value
    if kind.startswith(INT_PREFIXES):
        try:
            return int(value)
        except (ValueError, TypeError):
            return value
    if kind.startswith(FLOAT_PREFIXES):
        try:
            f = float(value)
            return f if f - int(f) != 0 else int(f)
        except (ValueError, TypeError):
            return value
    if kind in BOOL_TYPES:
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, TypeError, ValueError):
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError):
        return value


def one_function(text, tools):
    """`NAME>…body` (the text after `<function=`) → (name, arguments JSON)."""
    cut = text.index(">")
    name = text[:cut]
    props = properties_of(name, tools)
    args = {}
    for found in PARAMETER.findall(text[cut + 1:]):
        k = found.index(">")
        pname, value = found[:k], found[k + 1:]
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        args[pname] = convert(value, pname, props)
    return name, json.dumps(args, ensure_ascii=False)


def extract(text, tools):
    if "<function=" not in text:
        return {"content": text, "calls": []}
    try:
        blocks = [a or b for a, b in BLOCK.findall(text)] or [text]
        bodies = [a or b for block in blocks for a, b in FUNCTION.findall(block)]
        if not bodies:
            return {"content": text, "calls": []}
        calls = [one_function(body, tools) for body in bodies]
        start = text.find("<tool_call>")
        if start < 0:
            start = text.find("<function=")
        content = text[:start]
        return {
            "content": content or None,
            "calls": [{"name": n, "arguments": a} for n, a in calls],
        }
    except Exception:  # the official parser's catch-all: everything is content
        return {"content": text, "calls": []}


def main():
    req = json.load(sys.stdin)
    out = [extract(c["text"], c.get("tools")) for c in req["cases"]]
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
