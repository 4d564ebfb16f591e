"""upgrade/validate"""
