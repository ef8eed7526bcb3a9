"""The PyTorch biLM: character CNN + highway + projection, projected LSTMs, the LM head."""
