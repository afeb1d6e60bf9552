"""guards"""
