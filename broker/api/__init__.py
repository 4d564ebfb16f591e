"""broker/api"""
