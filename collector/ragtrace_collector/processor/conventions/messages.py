"""Prompts and completions as each convention writes them (attributes or events)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragtrace import attributes as A
from ragtrace_collector.processor.conventions.documents import LANGFUSE_INPUT, LANGFUSE_OUTPUT
from ragtrace_collector.processor.conventions.values import QUERY_KEYS, indexed, maybe_json, text_of

Message = tuple[str, str]  # (role, content)


def _parts_text(parts: Any) -> str | None:
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        texts = []
        for part in parts:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                text = part.get("content", part.get("text"))
                if isinstance(text, str):
                    texts.append(text)
        return "".join(texts) if texts else None
    return None


def _json_messages(value: Any) -> list[Message]:
    """GenAI ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (role + parts) and OpenAI-style lists."""
    parsed = maybe_json(value)
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list):
        return []
    out = []
    for msg in parsed:
        if not isinstance(msg, dict):
            continue
        inner = msg.get("message")
        if not isinstance(inner, dict):
            inner = msg
        text = _parts_text(inner.get("parts")) or _parts_text(inner.get("content"))
        if text is not None:
            out.append((str(inner.get("role") or "user"), text))
    return out


_ROLE_PREFIX = re.compile(r"^(system|user|assistant|developer|tool|human|ai): ", re.IGNORECASE)


def _role_prefixed(text: str) -> list[Message]:
    """OpenLIT's flattened prompt: ``role: content`` lines (continuation lines join the previous message)."""
    out: list[Message] = []
    for line in text.split("\n"):
        m = _ROLE_PREFIX.match(line)
        if m:
            out.append((m.group(1).lower(), line[m.end() :]))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line)
        else:
            out.append(("user", line))
    return out


def _indexed_messages(attrs: Mapping[str, Any], prefix: str, role_key: str, content_key: str) -> list[Message]:
    out = []
    for _, fields in indexed(attrs, prefix).items():
        content = fields.get(content_key)
        if content is None:
            continue
        out.append((str(fields.get(role_key) or ""), str(content)))
    return out


def _langfuse(value: Any, role: str) -> list[Message]:
    """A Langfuse generation's input or output: OpenAI-style messages (its OpenAI integration), else the text of
    an ``@observe(as_type="generation")`` function's arguments or result, as one message."""
    if value is None or value == "":
        return []
    msgs = _json_messages(value)
    if msgs:
        return msgs
    text = text_of(value, QUERY_KEYS)
    return [(role, text)] if text else []


def input_messages(attrs: Mapping[str, Any], events: Sequence[tuple[str, dict]] = ()) -> list[Message]:
    """The prompt messages of an LLM span (GenAI log events folded in: ``conventions.log_events``)."""
    msgs = _indexed_messages(attrs, A.LLM_INPUT_MESSAGES, "message.role", "message.content")
    if msgs:
        return msgs
    msgs = _indexed_messages(attrs, A.GEN_AI_PROMPT_PREFIX, "role", "content")  # OpenLLMetry
    if msgs:
        return msgs
    msgs = _json_messages(attrs.get(A.GEN_AI_INPUT_MESSAGES))
    if msgs:
        return _with_system_instructions(attrs, msgs)
    msgs = _langfuse(attrs.get(LANGFUSE_INPUT), "user")
    if msgs:
        return msgs
    prompt = attrs.get(A.GEN_AI_PROMPT_PREFIX)  # OpenLIT span attribute form
    if isinstance(prompt, str):
        return _json_messages(prompt) or _role_prefixed(prompt)
    out = []
    for name, ev in events:
        if name == "gen_ai.content.prompt" and isinstance(ev.get("gen_ai.prompt"), str):  # OpenLIT event
            prompt = ev["gen_ai.prompt"]
            out.extend(_json_messages(prompt) or _role_prefixed(prompt))
        elif name in ("gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message"):
            content = _parts_text(maybe_json(ev.get("content"))) or ev.get("content")
            if isinstance(content, str):
                out.append((name.split(".")[1], content))
    return out


def output_messages(attrs: Mapping[str, Any], events: Sequence[tuple[str, dict]] = ()) -> list[Message]:
    """The completion messages of an LLM span."""
    msgs = _indexed_messages(attrs, A.LLM_OUTPUT_MESSAGES, "message.role", "message.content")
    if msgs:
        return msgs
    msgs = _indexed_messages(attrs, A.GEN_AI_COMPLETION_PREFIX, "role", "content")
    if msgs:
        return msgs
    msgs = _json_messages(attrs.get(A.GEN_AI_OUTPUT_MESSAGES))
    if msgs:
        return msgs
    msgs = _langfuse(attrs.get(LANGFUSE_OUTPUT), "assistant")
    if msgs:
        return msgs
    completion = attrs.get(A.GEN_AI_COMPLETION_PREFIX)
    if isinstance(completion, str):
        return [("assistant", completion)]
    out = []
    for name, ev in events:
        if name == "gen_ai.content.completion" and isinstance(ev.get("gen_ai.completion"), str):
            out.append(("assistant", ev["gen_ai.completion"]))
        elif name == "gen_ai.choice":
            message = maybe_json(ev.get("message"))
            text = _parts_text(message.get("content")) if isinstance(message, dict) else None
            if text is None and isinstance(ev.get("message.content"), str):
                text = ev["message.content"]
            if text is not None:
                out.append(("assistant", text))
    return out


def _with_system_instructions(attrs: Mapping[str, Any], msgs: list[Message]) -> list[Message]:
    """GenAI's ``gen_ai.system_instructions`` (instructions given apart from the messages) as a first system
    message, so the prompt read is the prompt sent."""
    text = _parts_text(maybe_json(attrs.get(GEN_AI_SYSTEM_INSTRUCTIONS)))
    return [("system", text), *msgs] if text else msgs


GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"


def last_user_message(messages: list[Message]) -> str | None:
    for role, content in reversed(messages):
        if role in ("user", "human", ""):
            return content
    return None


def last_assistant_message(messages: list[Message]) -> str | None:
    for role, content in reversed(messages):
        if role in ("assistant", "ai", "model", ""):
            return content
    return messages[-1][1] if messages else None


_USER_ROLES = ("user", "human")
_ASSISTANT_ROLES = ("assistant", "ai", "model")


def conversation(
    prompt: list[Message], question: str | None, answer: str | None, contexts: Sequence[str] = ()
) -> list[Message]:
    """The user/assistant conversation of a request: the prompt's earlier exchanges, the question, the answer.

    A prompt is not a conversation as written: system and tool messages are instructions, and the last
    user message is often a template wrapping the question and stuffed with the retrieved contexts. So
    only user and assistant messages are kept and earlier user messages carrying a retrieved context are
    dropped. The prompt's final user message becomes the request's question when it is such a template
    (it holds a context or the question itself); otherwise it is the user's own words and stays (the
    question may be a rewrite made for retrieval). Without a final user message the question is appended.
    Empty when the prompt has no messages, so the record keeps its single question/answer exchange.
    """
    if not prompt:
        return []
    stuffed = [c for c in contexts if len(c.strip()) >= 20]
    turns: list[Message] = []
    for role, content in prompt[:-1]:
        role = role.lower()
        if role in _ASSISTANT_ROLES:
            turns.append(("assistant", content))
        elif (role in _USER_ROLES or role == "") and not any(c in content for c in stuffed):
            turns.append(("user", content))
    role, content = prompt[-1][0].lower(), prompt[-1][1]
    if role in _USER_ROLES or role == "":
        if question and (question in content or any(c in content for c in stuffed)):
            content = question
        if not turns or turns[-1] != ("user", content):  # the question may precede a contexts-only message
            turns.append(("user", content))
    else:
        if role in _ASSISTANT_ROLES:
            turns.append(("assistant", content))
        if question:
            turns.append(("user", question))
    if answer:
        turns.append(("assistant", answer))
    return [t for t in turns if t[1].strip()]
