"""What a SKILL.md says: safe parsing, the Agent Skills rules, skill directories on disk."""
