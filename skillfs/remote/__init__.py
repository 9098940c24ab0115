"""The client/server contract: the wire mapping, the `grpc://` engine and the generated code."""
