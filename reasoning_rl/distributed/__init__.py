"""The distributed trainer (HybridFlow shape): one driver process runs the loop, a group of SPMD model workers
(Ray actors, one per rank, placed by a Ray placement group) holds the FSDP2 shards and the rollout engines."""
