"""`pagoda bench …`: benchmarks that ship with the engine (serving, for now)."""
