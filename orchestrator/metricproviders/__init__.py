"""Where a canary analysis reads its samples from, one module per source. Each turns what its
source answers into `orchestrator.analysis.window.Scrape` values; the arithmetic stays pure."""
