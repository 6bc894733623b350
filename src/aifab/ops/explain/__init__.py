"""Explanations: Shapley values per prediction, global importance, by modality."""
