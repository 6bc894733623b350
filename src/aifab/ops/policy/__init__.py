"""Retrain policies: their spec, the service functions, and the gate a retrain passes."""
