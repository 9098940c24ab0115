"""langchain's own fake chat model for the adapters' tests (deepagents, LangChain): it takes
the tools an agent binds and records what it was sent and offered, no network."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool


class ScriptedChat(GenericFakeChatModel):
    """Answers the scripted `messages` in turn; `sent` holds each call's messages, `offered`
    the tool names bound before each call."""

    sent: list[list[BaseMessage]] = []
    offered: list[list[str]] = []

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kw: Any) -> ScriptedChat:
        self.offered.append([convert_to_openai_tool(t)["function"]["name"] for t in tools])
        return self

    def _generate(self, messages: list[BaseMessage], *a: Any, **kw: Any) -> Any:
        self.sent.append(list(messages))
        return super()._generate(messages, *a, **kw)
