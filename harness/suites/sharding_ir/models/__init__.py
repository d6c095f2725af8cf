"""IR models: HF-compatible decoders (same parameter names as the checkpoints) built from
transformers config classes, with sharding hints where a sharded model splits or reduces."""
