"""What tests share: a private redis-server, certificates, a clock, stub servers, rpc helpers."""
