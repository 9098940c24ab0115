"""Generated gRPC modules of protos/skillfs/v1 (`make proto`)."""
