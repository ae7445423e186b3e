"""What a record's work writes, and the offsets it completes: the results writer, outcomes
(results, retries, dead letters), documents' runs and their changelog, the work item and its
partition's state, the exactly-once transactions the outputs are staged in."""
