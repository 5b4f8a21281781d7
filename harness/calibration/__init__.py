"""Calibration: probes that measure a GPU's arithmetic (``probe``, ``fp32``, ``mma``) and the reciprocal table (``rcp_table``).
"""
