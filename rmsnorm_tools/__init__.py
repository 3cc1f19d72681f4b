"""rmsnorm's tools, outside the library package: the benchmark and its fixed suite (bench,
suite), the tuning sweep and the launch table it writes (sweep, table_gen), and the demo."""
