"""rmsnorm inside other libraries: Hugging Face models' RMSNorm modules replaced (hf) and
DTensor's sharding rules and parallel styles for rmsnorm's ops (dtensor)."""
