"""Small helpers with no domain: an LRU, an outage logged once, a budget, durations, text."""
