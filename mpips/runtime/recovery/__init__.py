"""Checkpoints every rank stops for, and the preemption signals that ask for them."""
