"""ModelInfo + nodes -> Plan: strategy, split, memory per node, and the reasons."""
