__spine_prepare('lookup(key="book")', 'lookup(key="pen")')
book = lookup(key='book')
pen = lookup(key='pen')
result = book + pen
