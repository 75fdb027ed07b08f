"""Canary analysis: window arithmetic over scraped Prometheus samples, the metrics a
runbook may name, gates (absolute bounds, candidate-vs-control ratios) and the readout. Pure: the
scrapes come in as data (orchestrator/metricproviders/ reads them)."""
