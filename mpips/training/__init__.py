"""What is trained: datasets and a worker's batches, models, the flat view of
a model's parameters, and the servers' optimizer."""
