"""Other schedulers run through the same procedure as Tocsin, to compare against."""
