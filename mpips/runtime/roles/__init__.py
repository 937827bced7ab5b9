"""The roles of a job, written once over a transport: worker (and Local SGD's), server, group server, evaluator, and where a worker's batches come from."""
