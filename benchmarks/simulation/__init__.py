"""The pure simulations the benchmarks run (a month of runs per capacity mode, months of a
capacity policy over sampled stockouts): benchmark code, not the flow's, so they live here
and the tests of their arithmetic import them from here."""
