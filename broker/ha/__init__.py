"""broker/ha"""
