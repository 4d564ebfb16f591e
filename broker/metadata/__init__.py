"""broker/metadata"""
