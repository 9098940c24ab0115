"""Adversarial tests against a real `skillfs serve` process (issue 10): each names what it
protects, and each abuse loop is bounded in count and time. Traffic goes to 127.0.0.1 only."""
