"""Everything that changes weights: SFT (trl + peft), embedder (sentence-transformers), export/merge/hub."""
