"""Simulation inputs: scenario files, their schema, generators and the built-in scenario suite."""
