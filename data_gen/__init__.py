"""Everything that asks a teacher: triple extraction, CoT distillation, personalized graph, pairs, negatives."""
