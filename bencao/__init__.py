"""bencao (本草): knowledge graphs, distillation, training and evidence-grounded answers for TCM, food and supplements."""

__version__ = "0.1.0"
