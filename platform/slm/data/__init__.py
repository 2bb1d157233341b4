"""Ray Data stages: statistics, embedding, clustering, resampling, tokenization and packing."""
