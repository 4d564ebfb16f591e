"""broker/store"""
