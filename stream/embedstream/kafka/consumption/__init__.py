"""The consumer-group shells (the processor's fetch loop, the store writer's feed) and their
parts: the member's lifecycle, fetching, admission, retries read early, rebalances, commits."""
