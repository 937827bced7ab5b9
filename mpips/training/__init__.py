"""What is trained, and how long it takes: datasets and a worker's batches,
models, the flat view of a model's parameters, the servers' optimizer, and the
emulated device time and heterogeneity of a worker's compute."""
