"""Renderers from trace data to text and files."""
