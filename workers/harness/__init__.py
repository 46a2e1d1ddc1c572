"""The test harness: run a shard's test ids with pytest in a child process, one JSON event per test
streamed to a file, so a crash or a hang loses nothing already finished; the rest of the shard
continues in a fresh process. A warm pool (a fork server that imported torch and the test
databases once) keeps interpreter start-up off the per-test path."""
