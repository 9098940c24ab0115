"""The skillfs server (docs/design.md §6): `skillfs serve`. Start one with
`SkillfsServer(ServerConfig(store=URL, ...)).start()` from `skillfs.server.app`."""
