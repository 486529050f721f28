"""Qwen3-30B-A3B-shaped MoE decoder in Triton, its weights in HBF (issue 20)."""
