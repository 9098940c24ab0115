"""Adapters for agent frameworks (docs/integrations.md), each behind its optional dependency:
`skillfs.integrations.deepagents` (`pip install skillfs[deepagents]`),
`skillfs.integrations.langchain` (`pip install skillfs[langchain]`) and
`skillfs.integrations.openai_agents` (`pip install skillfs[openai-agents]`). Import the module
you need; this package imports no framework."""
