"""Finding the nodes: Bonjour, hand-added hosts, probes over SSH, the registry,
Thunderbolt topology and RDMA verdicts."""
