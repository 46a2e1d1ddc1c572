"""Test modules and pytest plugins the benchmarks run (not collected by `make test`)."""
