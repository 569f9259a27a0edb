"""Sample formats: how a dataset on shared storage is listed, and synthetic datasets of that shape."""
