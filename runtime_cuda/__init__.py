"""hbfsim part."""
